package storm

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// maxProblemBytes bounds the problem+json replay bodies read to recognise
// the response-too-large problem.
const maxProblemBytes = 16 << 10

// kind is the class of one attempt, as the package documentation defines.
type kind int

const (
	kindTransport  kind = iota // no complete HTTP response
	kindReplay                 // Idempotent-Replayed: true, any status
	kindInProgress             // 409 without the replay header
	kindRetryLater             // 408, 425, 429, 503 without the replay header
	kindOriginal               // anything else: the server ran the request
)

// notFinal reports whether a status without the replay header asks the
// client to come back later rather than answering: 408, 409, 425, 429 and
// 503, the statuses a correct server answers without running the request,
// or after releasing the key.
func notFinal(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly,
		http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return true
	}
	return false
}

func kindOf(a attempt) kind {
	switch {
	case a.err != nil:
		return kindTransport
	case a.replay:
		return kindReplay
	case a.status == http.StatusConflict:
		return kindInProgress
	case notFinal(a.status):
		return kindRetryLater
	default:
		return kindOriginal
	}
}

// isTooLarge reports whether body is the response-too-large problem that
// idemkey replays in place of a body over MaxResponseBytes: a problem whose
// type ends in "response-too-large" and whose status is the response's.
func isTooLarge(body []byte, status int) bool {
	if len(body) > maxProblemBytes {
		return false
	}
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	return json.Unmarshal(body, &p) == nil && strings.HasSuffix(p.Type, "response-too-large") && p.Status == status
}

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

// keyVerdict is the classification of one key.
type keyVerdict struct {
	class    string
	failure  Failure // counts, statuses and, unless passed, the reason
	oversize int
	server   int // 5xx originals
	probe    int // a probe outcome
}

// answer identifies a distinct final answer.
type answer struct {
	status int
	sum    [sha256.Size]byte
}

// classifyKey applies the rules of the package documentation to one key's
// attempts in the storm and in the late probe.
func classifyKey(key string, attempts, probe []attempt) keyVerdict {
	kv := keyVerdict{failure: Failure{Key: key, Statuses: map[int]int{}}}
	f := &kv.failure
	executed := map[int]int{} // statuses of the originals
	var finals []attempt
	for _, a := range attempts {
		if a.err == nil {
			f.Statuses[a.status]++
		}
		switch kindOf(a) {
		case kindTransport:
			f.TransportErrors++
		case kindInProgress:
			f.InProgress++
		case kindRetryLater:
			f.RetryLater++
		case kindReplay:
			f.Replays++
			if a.oversize {
				kv.oversize++
			}
			finals = append(finals, a)
		case kindOriginal:
			f.Originals++
			executed[a.status]++
			if a.status >= 500 {
				kv.server++
			}
			finals = append(finals, a)
		}
	}

	// An oversize replay stands for the original of its status.
	plain := map[int]answer{}
	for _, a := range finals {
		if _, ok := plain[a.status]; !ok && !a.oversize {
			plain[a.status] = answer{a.status, a.sum}
		}
	}
	identity := func(a attempt) answer {
		if p, ok := plain[a.status]; ok && a.oversize {
			return p
		}
		return answer{a.status, a.sum}
	}
	type group struct {
		a     attempt
		count int
	}
	groups := map[answer]*group{}
	var order []answer
	for _, a := range finals {
		id := identity(a)
		if g, ok := groups[id]; ok {
			g.count++
			continue
		}
		groups[id] = &group{a: a, count: 1}
		order = append(order, id)
	}
	// Most frequent first, then first seen: order[0] is the final answer.
	sort.SliceStable(order, func(i, j int) bool { return groups[order[i]].count > groups[order[j]].count })

	var p attempt
	if len(probe) > 0 && len(order) > 0 {
		p = probe[len(probe)-1]
		switch kindOf(p) {
		case kindReplay:
			if identity(p) == order[0] {
				kv.probe = probeIdentical
			} else {
				kv.probe = probeDivergent
			}
		case kindOriginal:
			kv.probe = probeExecuted
			executed[p.status]++
		default:
			kv.probe = probeNotFinal
		}
		f.Probe = describeProbe(p, kv.probe)
	}

	var failed []string
	if n := sum(executed); n > 1 {
		s := fmt.Sprintf("executed %d times (%s without %s: true)", n, describeStatuses(executed, 0), headerReplayed)
		if kv.probe == probeExecuted {
			s += ", the late probe included"
		}
		failed = append(failed, s)
	} else if kv.probe == probeExecuted {
		failed = append(failed, fmt.Sprintf("late probe ran it again: %d without %s: true", p.status, headerReplayed))
	}
	if len(order) > 1 {
		var parts []string
		for i, id := range order {
			if i == 3 {
				parts = append(parts, fmt.Sprintf("and %d more", len(order)-3))
				break
			}
			g := groups[id]
			parts = append(parts, fmt.Sprintf("%d %s x%d", id.status, describeBody(g.a), g.count))
		}
		failed = append(failed, fmt.Sprintf("divergent: %d distinct final responses: %s",
			len(order), strings.Join(parts, ", ")))
	}
	if kv.probe == probeDivergent {
		failed = append(failed, fmt.Sprintf("late probe: the replay differs from the final answer: %d %s, want %d %s",
			p.status, describeBody(p), order[0].status, describeBody(groups[order[0]].a)))
	}
	switch {
	case len(failed) > 0:
		kv.class = classFailed
		f.Reason = strings.Join(failed, "; ")
	case len(order) == 0:
		kv.class = classInconclusive
		if len(attempts) == 0 {
			f.Reason = "not sent"
		} else {
			f.Reason = "no final answer"
		}
	case f.Originals == 0 && f.TransportErrors == 0:
		// The key is fresh: its original can only be one of our attempts,
		// and none was lost on the way.
		kv.class = classInconclusive
		f.Reason = fmt.Sprintf("replayed, never executed: %d replays and no original, with no attempt lost on the way", f.Replays)
	case kv.probe == probeNotFinal:
		kv.class = classInconclusive
		f.Reason = "late probe got no final answer: " + f.Probe
	default:
		kv.class = classPassed
	}
	return kv
}

func sum(m map[int]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
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
func describeProbe(p attempt, outcome int) string {
	switch {
	case p.err != nil:
		return "transport error: " + p.err.Error()
	case outcome == probeIdentical:
		return fmt.Sprintf("%d replayed, identical", p.status)
	case outcome == probeDivergent:
		return fmt.Sprintf("%d replayed, different", p.status)
	case outcome == probeExecuted:
		return fmt.Sprintf("%d not replayed", p.status)
	default:
		return fmt.Sprintf("%d not replayed, not final", p.status)
	}
}

// describeBody renders a short, quoted description of a response body.
func describeBody(a attempt) string {
	if a.oversize {
		return fmt.Sprintf("(response-too-large problem, %d bytes)", a.size)
	}
	if a.size == 0 {
		return "(empty body)"
	}
	s := strconv.Quote(string(a.body()))
	if a.size > int64(a.snipLen) {
		s += fmt.Sprintf("...(%d bytes)", a.size)
	}
	return s
}

// report classifies every key and builds the report.
func (r *runner) report(keys []*keyRun, elapsed time.Duration) *Report {
	cfg := r.cfg
	rep := &Report{
		URL:          cfg.URL,
		Method:       cfg.Method,
		KeyHeader:    cfg.KeyHeader,
		Keys:         cfg.Keys,
		Dups:         cfg.Dups,
		Concurrency:  cfg.Concurrency,
		Timeout:      cfg.Timeout,
		Retry:        cfg.Retry,
		Elapsed:      elapsed,
		Retries:      int(r.retries.Load()),
		StatusCounts: map[int]int{},
		Probe:        Probe{Enabled: !cfg.NoProbe, Retries: int(r.probeRetries.Load())},
	}
	list := func(to *[]Failure, f Failure) {
		if cfg.MaxFailures < 0 || len(*to) < cfg.MaxFailures {
			*to = append(*to, f)
		}
	}
	var latencies []time.Duration
	var firstErr error
	for _, k := range keys {
		k.mu.Lock()
		attempts, probe := k.attempts, k.probe
		k.mu.Unlock()
		kv := classifyKey(k.key, attempts, probe)
		f := kv.failure
		rep.Requests += len(attempts)
		rep.Originals += f.Originals
		rep.Replays += f.Replays
		rep.OversizeReplays += kv.oversize
		rep.InProgress += f.InProgress
		rep.RetryLater += f.RetryLater
		rep.TransportErrors += f.TransportErrors
		rep.ServerErrors += kv.server
		for _, a := range attempts {
			if a.err != nil {
				if firstErr == nil {
					firstErr = a.err
				}
				if a.timeout {
					rep.Timeouts++
				}
				continue
			}
			rep.Responses++
			rep.StatusCounts[a.status]++
			latencies = append(latencies, a.latency)
		}
		switch kv.probe {
		case probeIdentical:
			rep.Probe.Identical++
		case probeExecuted:
			rep.Probe.Executed++
		case probeDivergent:
			rep.Probe.Divergent++
		case probeNotFinal:
			rep.Probe.NotFinal++
		}
		if kv.probe != probeNone {
			rep.Probe.Sent++
		}
		switch kv.class {
		case classPassed:
			rep.KeysPassed++
			if f.Originals == 0 {
				rep.ReplayOnly++
			}
		case classFailed:
			rep.KeysFailed++
			list(&rep.Failures, f)
		default:
			rep.KeysInconclusive++
			list(&rep.Inconclusive, f)
		}
	}
	rep.Errors = rep.TransportErrors + rep.ServerErrors
	rep.Latency = percentiles(latencies)
	if rep.Responses == 0 && rep.Requests > 0 {
		rep.Error = fmt.Sprintf("no HTTP response: all %d requests failed (first error: %v)", rep.Requests, firstErr)
	}
	return rep
}

// percentiles computes nearest-rank latency percentiles.
func percentiles(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p/100*float64(len(ds)))) - 1
		return ds[max(0, min(i, len(ds)-1))]
	}
	return Latency{P50: rank(50), P90: rank(90), P99: rank(99), Max: ds[len(ds)-1]}
}
