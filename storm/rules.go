package storm

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The rules that judge one key from its attempts: a pure function of one
// Operation (judgeKey), used by the storm to pick the keys it probes and
// by Check for the verdict. The package documentation states them; each
// verdict names the rule that decided it.

// The rules, by the names the report gives them.
const (
	// RuleAtMostOnce: a key with two executions fails; a key whose one
	// execution may have had a twin in an attempt whose answer was lost
	// (a timeout or a transport error sent before the key's outcome was
	// known) is unproven from answers alone: inconclusive, unless a count
	// or a ledger decides it.
	RuleAtMostOnce = "at-most-once"
	// RuleRetriesNotFinal: a 5xx, 408, 425, 429 or 503 that storm retried
	// is neither an execution nor a final answer; only the answer that
	// ended a copy is. It decides every key that had such an answer.
	RuleRetriesNotFinal = "retries-not-final"
	// RuleOneAnswer: every final answer of a key has the same status and
	// body.
	RuleOneAnswer = "one-answer"
	// RuleNoLostSuccess: a key with a final answer is replayed, identically,
	// to the late probe.
	RuleNoLostSuccess = "no-lost-success"
	// RuleLiveness: a key with no final answer is inconclusive.
	RuleLiveness = "liveness"
)

// rules lists the rules in the order the report gives them.
var rules = []string{RuleAtMostOnce, RuleRetriesNotFinal, RuleOneAnswer, RuleNoLostSuccess, RuleLiveness}

// Key classes.
const (
	classPassed       = "passed"
	classFailed       = "failed"
	classInconclusive = "inconclusive"
)

// Probe outcomes.
const (
	probeNone = iota
	probeIdentical
	probeExecuted
	probeDivergent
	probeNotFinal
)

// keyVerdict is the judgement of one key.
type keyVerdict struct {
	class    string
	rule     string  // the rule that decided a key that did not pass
	failure  Failure // counts, statuses and, unless passed, the reason
	oversize int
	server   int // 5xx answers, retried or not
	setAside int // 5xx that storm retried (RuleRetriesNotFinal)
	probe    int // a probe outcome
	// unproven: at most once could not be decided from the answers;
	// probeNotFinal: the probe got no final answer.
	unproven, probeNotFinal bool
	final                   bool // the key has a final answer
	finalStatus             int  // the status of its final answer, when final
	sent                    bool // the key has an attempt
}

// answer identifies a distinct final answer.
type answer struct {
	status int
	sum    [sha256.Size]byte
}

// judgeKey applies the rules to one key's attempts, the probe's included.
func judgeKey(op *Operation) keyVerdict {
	kv := keyVerdict{failure: Failure{Key: op.Key}}
	f := &kv.failure
	var finals, execs, lost, stormAttempts []*Attempt
	var probe *Attempt
	// The first replay's answer: only a replay shows an outcome stored (an
	// original's answer may leave the server before its record is).
	storedAt := time.Duration(math.MaxInt64)
	for i := range op.Attempts {
		a := &op.Attempts[i]
		if a.Probe {
			probe = a
			continue
		}
		stormAttempts = append(stormAttempts, a)
		switch {
		case a.Class.Lost():
			f.TransportErrors++
			lost = append(lost, a)
		case a.Class == ClassInProgress:
			f.InProgress++
		case a.Class == ClassRetryLater:
			f.RetryLater++
		case a.Class == ClassReplay:
			f.Replays++
			if a.Oversize {
				kv.oversize++
			}
			storedAt = min(storedAt, a.Done)
		case a.Class == ClassServerError:
			// Never an execution nor a final answer: idemkey releases the
			// key on a 5xx, and the next attempt runs it again.
			kv.server++
			if a.Retried {
				kv.setAside++
			}
		default:
			execs = append(execs, a)
		}
		if a.final() {
			finals = append(finals, a)
		}
	}
	f.Originals = len(execs)
	kv.sent, kv.final = len(stormAttempts) > 0, len(finals) > 0

	identity, groups := groupAnswers(finals)
	if len(groups) > 0 {
		kv.finalStatus = groups[0].id.status
	}
	if probe != nil && len(groups) > 0 {
		switch {
		case probe.Class == ClassReplay && identity(probe) == groups[0].id:
			kv.probe = probeIdentical
		case probe.Class == ClassReplay:
			kv.probe = probeDivergent
		case probe.Class.Executes() && !probe.Retried:
			kv.probe = probeExecuted
		default:
			kv.probe = probeNotFinal
		}
		f.Probe = describeProbe(probe, kv.probe)
	}

	type finding struct{ rule, reason string }
	var failed []finding
	executed := len(execs)
	if kv.probe == probeExecuted {
		executed++
	}
	switch {
	case executed > 1:
		statuses := map[int]int{}
		for _, a := range execs {
			statuses[a.Status]++
		}
		s := fmt.Sprintf("executed %d times (%s without %s: true)", executed, describeStatuses(statuses, 0), headerReplayed)
		if kv.probe == probeExecuted {
			statuses[probe.Status]++
			s = fmt.Sprintf("executed %d times (%s without %s: true), the late probe included", executed,
				describeStatuses(statuses, 0), headerReplayed)
		}
		failed = append(failed, finding{RuleAtMostOnce, s})
	case kv.probe == probeExecuted:
		failed = append(failed, finding{RuleNoLostSuccess, fmt.Sprintf("late probe ran it again: %d without %s: true",
			probe.Status, headerReplayed)})
	}
	if len(groups) > 1 {
		var parts []string
		for i, g := range groups {
			if i == 3 {
				parts = append(parts, fmt.Sprintf("and %d more", len(groups)-3))
				break
			}
			parts = append(parts, fmt.Sprintf("%d %s x%d", g.id.status, describeBody(g.a), g.count))
		}
		failed = append(failed, finding{RuleOneAnswer, fmt.Sprintf("divergent: %d distinct final responses: %s",
			len(groups), strings.Join(parts, ", "))})
	}
	if kv.probe == probeDivergent {
		failed = append(failed, finding{RuleNoLostSuccess, fmt.Sprintf("late probe: the replay differs from the final answer: %d %s, want %d %s",
			probe.Status, describeBody(probe), groups[0].id.status, describeBody(groups[0].a))})
	}

	// At most once from answers alone: the executions, and the lost
	// attempts sent before a replay showed the outcome stored, each of
	// which may have run (and may still be running) on the server.
	var lostBefore []*Attempt
	for _, a := range lost {
		if a.Sent < storedAt {
			lostBefore = append(lostBefore, a)
		}
	}
	unproven := ""
	if executed <= 1 && kv.final {
		switch {
		case len(execs)+len(lostBefore) > 1:
			unproven = fmt.Sprintf("unproven: %s, and %s that may have run too: only a count or a ledger can tell",
				plural(len(execs), "execution"), describeLost(lostBefore))
		case len(execs) == 0 && len(lostBefore) == 0:
			unproven = fmt.Sprintf("replayed, never executed: %d replays and no original, with no attempt lost on the way", f.Replays)
		}
	}
	kv.probeNotFinal = kv.probe == probeNotFinal
	switch {
	case len(failed) > 0:
		kv.class, kv.rule = classFailed, failed[0].rule
		var reasons []string
		for _, x := range failed {
			reasons = append(reasons, x.reason)
		}
		f.Reason = strings.Join(reasons, "; ")
	case !kv.final:
		kv.class, kv.rule = classInconclusive, RuleLiveness
		f.Reason = "not sent"
		if kv.sent {
			f.Reason = "no final answer: " + describeAttempts(stormAttempts)
		}
	case unproven != "":
		kv.class, kv.rule, kv.unproven = classInconclusive, RuleAtMostOnce, true
		f.Reason = unproven
	case kv.probeNotFinal:
		kv.class, kv.rule = classInconclusive, RuleNoLostSuccess
		f.Reason = "late probe got no final answer: " + f.Probe
	default:
		kv.class = classPassed
	}
	f.Rule = kv.rule
	if kv.class != classPassed { // a passed key's are not listed: spare the map
		f.Statuses = map[int]int{}
		for _, a := range stormAttempts {
			if a.Class.Answered() {
				f.Statuses[a.Status]++
			}
		}
	}
	return kv
}

// resolve marks an unproven key as proven to have run once (by a count or
// a ledger): it passes, unless the probe got no final answer.
func (kv *keyVerdict) resolve() {
	kv.unproven = false
	kv.failure.Reason, kv.class, kv.rule = "", classPassed, ""
	if kv.probeNotFinal {
		kv.class, kv.rule = classInconclusive, RuleNoLostSuccess
		kv.failure.Reason = "late probe got no final answer: " + kv.failure.Probe
	}
	kv.failure.Rule = kv.rule
}

type answerGroup struct {
	id    answer
	a     *Attempt
	count int
}

// groupAnswers groups the final answers by identity (status and body; an
// oversize replay stands for the original of its status) and returns the
// identity function and the groups, most frequent first, then first seen:
// the first is the key's final answer. A key has few final answers: the
// groups are a slice, searched.
func groupAnswers(finals []*Attempt) (func(*Attempt) answer, []answerGroup) {
	var plain []answer // the first non-oversize answer of each status
	for _, a := range finals {
		if !a.Oversize && !slices.ContainsFunc(plain, func(p answer) bool { return p.status == a.Status }) {
			plain = append(plain, answer{a.Status, a.BodySHA256})
		}
	}
	identity := func(a *Attempt) answer {
		if a.Oversize {
			if i := slices.IndexFunc(plain, func(p answer) bool { return p.status == a.Status }); i >= 0 {
				return plain[i]
			}
		}
		return answer{a.Status, a.BodySHA256}
	}
	var groups []answerGroup
	for _, a := range finals {
		id := identity(a)
		if i := slices.IndexFunc(groups, func(g answerGroup) bool { return g.id == id }); i >= 0 {
			groups[i].count++
			continue
		}
		groups = append(groups, answerGroup{id: id, a: a, count: 1})
	}
	slices.SortStableFunc(groups, func(x, y answerGroup) int { return y.count - x.count })
	return identity, groups
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// describeLost renders lost attempts: "2 lost attempts (timeout sent at
// 0.20s, transport error sent at 1.10s)".
func describeLost(lost []*Attempt) string {
	var parts []string
	for i, a := range lost {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d more", len(lost)-3))
			break
		}
		parts = append(parts, fmt.Sprintf("%s sent at %s", strings.ReplaceAll(string(a.Class), "_", " "), fmtDuration(a.Sent)))
	}
	return plural(len(lost), "lost attempt") + " (" + strings.Join(parts, ", ") + ")"
}

// describeAttempts renders a key's attempts in order, for a key without a
// final answer: "3 attempts: timeout, 409 in progress, 503 retry later".
func describeAttempts(as []*Attempt) string {
	var parts []string
	for i, a := range as {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("and %d more", len(as)-8))
			break
		}
		s := strings.ReplaceAll(string(a.Class), "_", " ")
		if a.Class.Answered() {
			s = strconv.Itoa(a.Status) + " " + s
		}
		if a.Retried {
			s += " (retried)"
		}
		parts = append(parts, s)
	}
	return plural(len(as), "attempt") + ": " + strings.Join(parts, ", ")
}

// describeStatuses renders status counts as "201 x1, 409 x4", transport
// errors last.
func describeStatuses(statuses map[int]int, transportErrors int) string {
	var parts []string
	for _, code := range slices.Sorted(maps.Keys(statuses)) {
		parts = append(parts, fmt.Sprintf("%d x%d", code, statuses[code]))
	}
	if transportErrors > 0 {
		parts = append(parts, fmt.Sprintf("transport error x%d", transportErrors))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// describeProbe renders what the late probe got.
func describeProbe(p *Attempt, outcome int) string {
	switch {
	case p.Class.Lost():
		return "transport error: " + p.Error
	case outcome == probeIdentical:
		return fmt.Sprintf("%d replayed, identical", p.Status)
	case outcome == probeDivergent:
		return fmt.Sprintf("%d replayed, different", p.Status)
	case outcome == probeExecuted:
		return fmt.Sprintf("%d not replayed", p.Status)
	default:
		return fmt.Sprintf("%d not replayed, not final", p.Status)
	}
}

// describeBody renders a short, quoted description of a response body.
func describeBody(a *Attempt) string {
	if a.Oversize {
		return fmt.Sprintf("(response-too-large problem, %d bytes)", a.Size)
	}
	if a.Size == 0 {
		return "(empty body)"
	}
	s := strconv.Quote(string(wholeRunes([]byte(a.Snippet))))
	if a.Size > int64(len(a.Snippet)) {
		s += fmt.Sprintf("...(%d bytes)", a.Size)
	}
	return s
}
