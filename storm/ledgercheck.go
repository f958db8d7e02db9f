package storm

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The properties CheckSchedule judges a history and its ledger by, by the
// names its report gives them. They are the rules of Check (RuleAtMostOnce
// and the others) stated over what the service recorded as well as what
// the clients saw; storm/README.md states them.
const (
	// PropAtMostOnce: a key has at most one execution in the ledger. An
	// execution whose completion the store refused (its fencing token was
	// stale) counts only if the service did not record the refusal
	// (Effect.Refused).
	PropAtMostOnce = "at-most-once"
	// PropNoLostSuccess: a key acknowledged with a final answer (a 2xx, or
	// any replay: a replay says the key ran) has exactly one execution.
	PropNoLostSuccess = "no-lost-success"
	// PropOneAnswer: every final answer of a key (status and body digest,
	// the late probe's included) equals the first one completed. It is a
	// first-writer-wins register per key: once a key has an answer it
	// never has another.
	PropOneAnswer = "one-answer"
	// PropMismatch: a different request under a key already used
	// (ScheduleOptions.Foreign) never gets a 2xx.
	PropMismatch = "mismatch"
	// PropLeases: no two executions of a key overlap in time, unless the
	// later one holds a higher fencing token and the earlier one's
	// completion was refused. (When the earlier one's outcome was reported
	// not stored instead, the overlap is announced; see
	// ScheduleReport.Unannounced.)
	PropLeases = "leases"
	// PropLiveness: once the faults have healed (ScheduleOptions.Healed),
	// every operation sent again gets a final answer within
	// ScheduleOptions.Bound.
	PropLiveness = "liveness"
)

// Properties lists the properties CheckSchedule judges, in the order its
// report gives them.
var Properties = []string{PropAtMostOnce, PropNoLostSuccess, PropOneAnswer, PropMismatch, PropLeases, PropLiveness}

// ScheduleOptions are what CheckSchedule needs beyond a history and its
// ledger.
type ScheduleOptions struct {
	// Foreign are attempts sent under keys of the history with a body
	// different from the key's own (PropMismatch). Default: none.
	Foreign []Attempt
	// Healed is when the last fault was healed, from the history's
	// Header.Started; PropLiveness is judged only when Bound is positive.
	Healed time.Duration
	// Bound is how long a key may take to reach a final answer once the
	// faults have healed: the lease, plus the longest Retry-After, plus
	// the client's backoff (and a margin for a slow machine). 0: liveness
	// is not judged.
	Bound time.Duration
	// MaxExamples bounds the violations listed per property; the counts
	// are always complete. 0 means 10, a negative value lists all.
	MaxExamples int
}

// Violation is one key that broke a property.
type Violation struct {
	// Property is the property's name (PropAtMostOnce and the others).
	Property string
	// Key is the idempotency key.
	Key string
	// Detail says what proves it: the executions or the answers.
	Detail string
}

// String returns the violation on one line.
func (v Violation) String() string { return v.Property + ": key " + v.Key + ": " + v.Detail }

// ScheduleReport is CheckSchedule's verdict.
type ScheduleReport struct {
	// Operations is the number of the history's operations.
	Operations int
	// Executions is the number of executions in the ledger that took
	// effect (refused ones left out), for keys of the history or not.
	Executions int
	// Refused is the number of executions whose refusal the ledger records.
	Refused int
	// Malformed is the number of ledger lines without a usable key (see
	// ReadLedger), left out: a ledger with any cannot vouch for the
	// history, and the report is not OK.
	Malformed int
	// Duplicates is the number of keys executed more than once.
	Duplicates int
	// Announced is the number of those whose every execution but the last
	// had its outcome reported not stored (Effect.NotStored): the service
	// was told a retry might run the key again. They still break
	// PropAtMostOnce (and PropNoLostSuccess, when acknowledged).
	Announced int
	// Counts holds the number of keys that broke each property, by name;
	// every property has an entry.
	Counts map[string]int
	// Violations lists keys that broke a property, at most
	// ScheduleOptions.MaxExamples per property.
	Violations []Violation

	announcedViolations int
}

// Unannounced returns the number of violations (keys times properties)
// not explained by an execution whose outcome the store reported not
// stored (a duplicate after it, or an overlap with the run that took its
// key over): what a mode that promises at most once, save for outcomes
// reported not stored, must keep at zero.
func (r *ScheduleReport) Unannounced() int {
	n := 0
	for _, c := range r.Counts {
		n += c
	}
	return n - r.announcedViolations + r.Malformed
}

// OK reports whether no property was broken and the ledger had no
// malformed line.
func (r *ScheduleReport) OK() bool {
	if r.Malformed > 0 {
		return false
	}
	for _, n := range r.Counts {
		if n > 0 {
			return false
		}
	}
	return true
}

// String returns the verdict in a few lines: the counts, then each
// violation listed, one a line.
func (r *ScheduleReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d operations, %d executions (%d refused), %d keys executed more than once (%d announced: outcome reported not stored)\n",
		r.Operations, r.Executions, r.Refused, r.Duplicates, r.Announced)
	if r.Malformed > 0 {
		fmt.Fprintf(&b, "  the ledger has %d malformed lines (no usable key): it cannot vouch for the history\n", r.Malformed)
	}
	for _, p := range Properties {
		verdict := "ok"
		if n := r.Counts[p]; n > 0 {
			verdict = fmt.Sprintf("VIOLATED by %d keys", n)
		}
		fmt.Fprintf(&b, "  %-16s %s\n", p, verdict)
	}
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	return b.String()
}

// Execution is one run of a handler as a ledger shows it: its lines
// merged by Effect.Execution.
type Execution struct {
	// Key is the idempotency key.
	Key string
	// ID is the Execution id ("#n" for the nth ledger line without one).
	ID string
	// Token is the fencing token it ran under (Effect.Attempt, or a
	// numeric Effect.Token); 0 when unknown.
	Token int
	// Start and End are the earliest start and the latest end of its
	// lines; zero when the ledger gives none.
	Start, End time.Time
	// Refused reports that one of its lines records the refusal of its
	// completion: it did not take effect.
	Refused bool
	// NotStored reports that one of its lines records that its outcome
	// could not be stored (Effect.NotStored).
	NotStored bool
}

// Executions merges a ledger's lines into executions, by key, each key's
// in order of start (then id). The lines of one execution may come in any
// order: a service typically writes the effect when it happens and the
// refusal of its completion later. Malformed lines (no usable key, see
// ReadLedger) are left out.
func Executions(ledger []Effect) map[string][]Execution {
	byKey := map[string][]Execution{}
	index := map[[2]string]int{}
	for n, e := range ledger {
		if malformedEffect(e) {
			continue
		}
		id := e.Execution
		if id == "" {
			id = "#" + strconv.Itoa(n+1)
		}
		i, ok := index[[2]string{e.Key, id}]
		if !ok {
			i = len(byKey[e.Key])
			index[[2]string{e.Key, id}] = i
			byKey[e.Key] = append(byKey[e.Key], Execution{Key: e.Key, ID: id})
		}
		x := &byKey[e.Key][i]
		if t := tokenOf(e); t > x.Token {
			x.Token = t
		}
		if !e.Start.IsZero() && (x.Start.IsZero() || e.Start.Before(x.Start)) {
			x.Start = e.Start
		}
		if e.End.After(x.End) {
			x.End = e.End
		}
		x.Refused = x.Refused || e.Refused
		x.NotStored = x.NotStored || e.NotStored
	}
	for _, xs := range byKey {
		slices.SortStableFunc(xs, func(a, b Execution) int {
			return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.ID, b.ID))
		})
	}
	return byKey
}

func tokenOf(e Effect) int {
	if e.Attempt > 0 {
		return e.Attempt
	}
	n, _ := strconv.Atoi(e.Token)
	return n
}

// CheckSchedule judges a history against its ledger (History.Ledger: the
// side effects the service recorded, outside its store) by the properties
// (Properties): it is how the project's fault schedules are checked. The
// one-answer property is a first-writer-wins register per key, checked by
// hand: once written a register never changes, so a key's history is
// linearizable exactly when all its known outputs are equal (an attempt
// whose answer was lost is an operation with an unknown output and fits
// anywhere), which is one pass over the attempts instead of a search.
// CheckSchedule is a pure function of its arguments, which it does not
// modify; a nil history gives an error wrapping ErrHistory.
func CheckSchedule(h *History, opts ScheduleOptions) (*ScheduleReport, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: nil", ErrHistory)
	}
	maxEx := opts.MaxExamples
	if maxEx == 0 {
		maxEx = 10
	}
	r := &ScheduleReport{Operations: len(h.Operations), Counts: make(map[string]int, len(Properties))}
	for _, p := range Properties {
		r.Counts[p] = 0
	}
	listed := map[string]int{}
	flag := func(prop, key, format string, args ...any) {
		r.Counts[prop]++
		if maxEx < 0 || listed[prop] < maxEx {
			listed[prop]++
			r.Violations = append(r.Violations, Violation{Property: prop, Key: key, Detail: fmt.Sprintf(format, args...)})
		}
	}

	for _, e := range h.Ledger {
		if malformedEffect(e) {
			r.Malformed++
		}
	}
	execs := Executions(h.Ledger)
	effective := make(map[string]int, len(execs))
	keys := make([]string, 0, len(execs))
	for key, xs := range execs {
		keys = append(keys, key)
		for _, x := range xs {
			if x.Refused {
				r.Refused++
			} else {
				effective[key]++
				r.Executions++
			}
		}
	}
	slices.Sort(keys)
	announced := map[string]bool{}
	for _, key := range keys {
		xs := execs[key]
		if n := effective[key]; n > 1 {
			r.Duplicates++
			if announcedTwice(xs) {
				r.Announced++
				r.announcedViolations++
				announced[key] = true
			}
			flag(PropAtMostOnce, key, "%d executions took effect: %s", n, describeExecutions(xs))
		}
		if checkLeases(key, xs, flag) {
			r.announcedViolations++
		}
	}

	for i := range h.Operations {
		op := &h.Operations[i]
		var first *Attempt
		acked := false
		for j := range op.Attempts {
			a := &op.Attempts[j]
			if !a.final() {
				continue
			}
			if a.Replayed || (a.Status >= 200 && a.Status < 300) {
				acked = true
			}
			if first == nil || a.Done < first.Done {
				first = a
			}
		}
		if first != nil {
			for j := range op.Attempts {
				a := &op.Attempts[j]
				if a.final() && !sameAnswer(a, first) {
					flag(PropOneAnswer, op.Key, "copy %d attempt %d answered %d %s after the first answer %d %s",
						a.Copy, a.Attempt, a.Status, digest(a), first.Status, digest(first))
					break
				}
			}
		}
		if acked && effective[op.Key] != 1 {
			if announced[op.Key] {
				r.announcedViolations++
			}
			flag(PropNoLostSuccess, op.Key, "acknowledged (%d), but %d executions took effect", first.Status, effective[op.Key])
		}
		if opts.Bound > 0 {
			checkLiveness(op, opts, flag)
		}
	}
	for i := range opts.Foreign {
		a := &opts.Foreign[i]
		if a.Status >= 200 && a.Status < 300 {
			flag(PropMismatch, a.Key, "a different request under the key got %d", a.Status)
		}
	}
	return r, nil
}

// announcedTwice reports whether every execution that took effect but the
// last one (by start) had its outcome reported not stored.
func announcedTwice(xs []Execution) bool {
	last := -1
	for i := range xs {
		if !xs[i].Refused {
			last = i
		}
	}
	for i := range xs {
		if i != last && !xs[i].Refused && !xs[i].NotStored {
			return false
		}
	}
	return true
}

// checkLeases flags the first pair of a key's executions that overlap in
// time when the later one does not hold a higher token or the earlier
// one's completion was not refused. It reports whether the pair it
// flagged is announced: the later holds a higher token and the earlier's
// outcome was reported not stored (the store could not say whether to
// refuse it).
func checkLeases(key string, xs []Execution, flag func(prop, key, format string, args ...any)) (announced bool) {
	for i := range xs {
		a := &xs[i]
		if a.Start.IsZero() || a.End.IsZero() {
			continue
		}
		for j := i + 1; j < len(xs); j++ {
			b := &xs[j]
			if b.Start.IsZero() || !b.Start.Before(a.End) {
				break // sorted by start: no later one overlaps a
			}
			if b.Token > a.Token && a.Refused {
				continue
			}
			note := ""
			if a.NotStored {
				note = ", outcome not stored"
			}
			flag(PropLeases, key, "executions %s (token %d, %s%s) and %s (token %d, %s) overlap by %v",
				a.ID, a.Token, refusedWord(a.Refused), note, b.ID, b.Token, refusedWord(b.Refused), a.End.Sub(b.Start).Round(time.Microsecond))
			return b.Token > a.Token && a.NotStored
		}
	}
	return false
}

// checkLiveness flags an operation sent after the faults healed that did
// not get a final answer within the bound.
func checkLiveness(op *Operation, opts ScheduleOptions, flag func(prop, key, format string, args ...any)) {
	from := time.Duration(-1)
	for j := range op.Attempts {
		if s := op.Attempts[j].Sent; s >= opts.Healed && (from < 0 || s < from) {
			from = s
		}
	}
	if from < 0 {
		return // not sent since the faults healed
	}
	deadline := from + opts.Bound
	for j := range op.Attempts {
		if a := &op.Attempts[j]; a.final() && a.Done <= deadline {
			return
		}
	}
	last := &op.Attempts[len(op.Attempts)-1]
	flag(PropLiveness, op.Key, "sent at %v after the faults healed, no final answer within %v (last attempt: %s %d at %v)",
		from.Round(time.Millisecond), opts.Bound, last.Class, last.Status, last.Done.Round(time.Millisecond))
}

// sameAnswer reports whether two final answers are the same outcome: the
// same status and body, a replay too large to store standing for its
// original's status.
func sameAnswer(a, b *Attempt) bool {
	if a.Status != b.Status {
		return false
	}
	return a.Oversize || b.Oversize || a.BodySHA256 == b.BodySHA256
}

func digest(a *Attempt) string {
	return fmt.Sprintf("sha256:%x…", a.BodySHA256[:6])
}

func refusedWord(refused bool) string {
	if refused {
		return "refused"
	}
	return "not refused"
}

func describeExecutions(xs []Execution) string {
	parts := make([]string, 0, len(xs))
	for _, x := range xs {
		note := refusedWord(x.Refused)
		if x.NotStored {
			note += ", outcome not stored"
		}
		parts = append(parts, fmt.Sprintf("%s (token %d, %s)", x.ID, x.Token, note))
	}
	return strings.Join(parts, ", ")
}
