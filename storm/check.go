package storm

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Check judges a history: every key by the rules (RuleAtMostOnce and the
// others; see the package documentation) on all its attempts, whichever
// operations sent them (Report.Keys counts distinct keys), the side-effect
// counts against the operations, and with a ledger (History.Ledger) at most once key by
// key; then it computes the figures and the thresholds, and returns the
// report the storm that recorded the history returned. It is the storm's
// own verdict: Run calls it on the history it recorded. Check is a pure
// function of h, which it does not modify, and safe for concurrent use. It
// returns an error wrapping ErrHistory, and no report, for a nil history or
// one whose header is not valid.
func Check(h *History) (*Report, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: nil", ErrHistory)
	}
	s := h.Header.Settings
	if s.Mode != modeBurst && s.Mode != modeLoad {
		return nil, fmt.Errorf("%w: mode %q", ErrHistory, s.Mode)
	}
	// A history built by hand may leave the counts of keys and copies to
	// its operations.
	s.Keys = max(s.Keys, len(h.Operations))
	s.Dups = max(s.Dups, 1)
	c := &checker{h: h, s: s, maxList: s.MaxFailures}
	if c.maxList == 0 {
		c.maxList = defaultMaxFailures
	}
	return c.run(), nil
}

// checker is one run of Check.
type checker struct {
	h        *History
	s        Settings
	maxList  int
	verdicts []keyVerdict // per key (units); the Failure kept only for keys that did not pass
	units    []*Operation // the operations grouped by key: one per distinct key
	unitOf   []int        // per operation, its key's index in units
	rep      *Report
	keys     map[string]bool // the history's keys, for the ledger's summary

	resolvedByCount, resolvedByLedger int // unproven keys proven to have run once
}

func (c *checker) run() *Report {
	h, s := c.h, c.s
	rep := &Report{
		URL: h.Header.URL, Method: h.Header.Method, Started: h.Header.Started, KeyHeader: s.KeyHeader,
		Keys: s.Keys, Dups: s.Dups, Concurrency: s.Concurrency, Timeout: s.Timeout, Retry: s.Retry,
		StatusCounts: map[int]int{}, Probe: Probe{Enabled: s.Probe},
	}
	c.rep = rep
	interrupted := h.End == nil || h.End.Interrupted || h.End.Error != ""
	if h.End != nil {
		rep.Elapsed, rep.Probe.Elapsed = h.End.Elapsed, h.End.ProbeElapsed
	}
	ledger := ledgerExecutions(h.Ledger)
	if h.Ledger != nil {
		rep.Ledger = &LedgerSummary{Effects: len(h.Ledger)}
	}

	var latencies []time.Duration
	firstErr := ""
	c.groupByKey()
	rep.Keys -= len(h.Operations) - len(c.units) // a key is judged once, however many operations sent it
	c.verdicts = make([]keyVerdict, len(c.units))
	for i, op := range c.units {
		kv := judgeKey(op)
		for j := range op.Attempts {
			a := &op.Attempts[j]
			if a.Probe {
				if a.Attempt > 1 {
					rep.Probe.Retries++
				}
				continue
			}
			rep.Requests++
			if a.Attempt > 1 {
				rep.Retries++
			}
			switch {
			case a.Class.Lost():
				rep.TransportErrors++
				if a.Class == ClassTimeout {
					rep.Timeouts++
				}
				if firstErr == "" {
					firstErr = a.Error
				}
				if h.End == nil {
					rep.Elapsed = max(rep.Elapsed, a.Done)
				}
				continue
			case a.Class == ClassReplay:
				rep.Replays++
			case a.Class == ClassInProgress:
				rep.InProgress++
			case a.Class == ClassRetryLater:
				rep.RetryLater++
			default:
				rep.Originals++
			}
			rep.Responses++
			rep.StatusCounts[a.Status]++
			latencies = append(latencies, a.Done-a.Sent)
			if h.End == nil {
				rep.Elapsed = max(rep.Elapsed, a.Done)
			}
		}
		rep.OversizeReplays += kv.oversize
		rep.ServerErrors += kv.server
		rep.RetriedServerErrors += kv.setAside
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
		if ledger != nil {
			c.applyLedger(&kv, ledger[op.Key])
		}
		if kv.class == classPassed {
			kv.failure = Failure{Key: op.Key, Originals: kv.failure.Originals}
		}
		c.verdicts[i] = kv
	}
	if rep.Ledger != nil {
		c.ledgerAgrees(ledger)
	}
	rep.Errors = rep.TransportErrors + rep.ServerErrors
	rep.Latency = percentiles(latencies)
	if rep.Responses == 0 && rep.Requests > 0 && !interrupted {
		rep.Error = fmt.Sprintf("no HTTP response: all %d requests failed (first error: %v)", rep.Requests, firstErr)
	}

	c.judgeCounts()
	c.tally()
	if s.Mode == modeLoad {
		rep.Load = c.load()
	}
	c.incident()
	if h.End != nil && h.End.Error != "" {
		rep.Error = h.End.Error
	}
	rep.Interrupted = interrupted
	rep.Thresholds = s.thresholds(rep)
	return rep
}

// groupByKey groups the operations by key (units, unitOf): one key's
// attempts may come from several operations, as from several histories
// merged (several load generators sending the same key), and the rules
// judge a key on all of them, in the order they were sent.
func (c *checker) groupByKey() {
	ops := c.h.Operations
	c.units = make([]*Operation, 0, len(ops))
	c.unitOf = make([]int, len(ops))
	byKey := make(map[string]int, len(ops))
	shared := map[int]bool{} // the units of several operations: copies (h is not modified)
	for i := range ops {
		u, ok := byKey[ops[i].Key]
		switch {
		case !ok:
			u = len(c.units)
			byKey[ops[i].Key] = u
			c.units = append(c.units, &ops[i])
		case !shared[u]:
			first := *c.units[u]
			first.Attempts = slices.Clone(first.Attempts)
			c.units[u] = &first
			shared[u] = true
			fallthrough
		default:
			c.units[u].Attempts = append(c.units[u].Attempts, ops[i].Attempts...)
		}
		c.unitOf[i] = u
	}
	for u := range shared {
		slices.SortStableFunc(c.units[u].Attempts, func(a, b Attempt) int { return cmp.Compare(a.Sent, b.Sent) })
	}
}

// hasKey reports whether the history has an operation with key.
func (c *checker) hasKey(key string) bool {
	if c.keys == nil {
		c.keys = make(map[string]bool, len(c.h.Operations))
		for i := range c.h.Operations {
			c.keys[c.h.Operations[i].Key] = true
		}
	}
	return c.keys[key]
}

// ledgerAgrees counts the ledger's keys, and says why the ledger disagrees
// with the history, if it does: keys the history does not have (the ledger
// is another run's, or the history is incomplete) or malformed effects (no
// key, a negative attempt). Such a ledger cannot vouch for the history's
// keys: the verdict is inconclusive (LedgerSummary.Disagreement).
func (c *checker) ledgerAgrees(ledger map[string]int) {
	l := c.rep.Ledger
	var other []string
	for key := range ledger {
		l.Keys++
		if !c.hasKey(key) {
			l.OtherKeys++
			other = append(other, key)
		}
	}
	for _, e := range c.h.Ledger {
		if malformedEffect(e) {
			l.Malformed++
		}
	}
	var why []string
	if l.OtherKeys > 0 {
		slices.Sort(other)
		why = append(why, fmt.Sprintf("%s not in the history (%q first)", plural(l.OtherKeys, "key"), other[0]))
	}
	if l.Malformed > 0 {
		why = append(why, fmt.Sprintf("%s malformed (no usable key, or a negative attempt)", plural(l.Malformed, "effect")))
	}
	if len(why) > 0 {
		l.Disagreement = "the ledger disagrees with the history: " + strings.Join(why, "; ")
	}
}

// malformedEffect reports whether a ledger line is unusable: no key, or a
// negative attempt.
func malformedEffect(e Effect) bool { return e.Key == "" || e.Attempt < 0 }

// applyLedger decides at most once for one key from the executions the
// ledger shows for it: two or more fail it; an unproven key passes only
// with exactly one.
func (c *checker) applyLedger(kv *keyVerdict, executions int) {
	switch {
	case kv.unproven && executions == 0:
		kv.failure.Reason = "the ledger shows no execution; " + kv.failure.Reason
	case executions > 1:
		reason := fmt.Sprintf("the ledger shows %d executions", executions)
		if kv.class == classFailed {
			kv.failure.Reason = reason + "; " + kv.failure.Reason
		} else {
			kv.failure.Reason = reason
		}
		kv.class, kv.rule, kv.unproven = classFailed, RuleAtMostOnce, false
		kv.failure.Rule = kv.rule
	case kv.unproven && executions == 1:
		kv.resolve()
		c.resolvedByLedger++
	}
}

// ledgerExecutions counts the executions of each key in a ledger: its
// distinct Execution ids, plus, for the effects recorded without one, the
// most of any one Effect; refused effects do not count, nor does an
// execution one of whose lines records its refusal (Executions). Nil for a nil
// ledger.
func ledgerExecutions(effects []Effect) map[string]int {
	if effects == nil {
		return nil
	}
	type tally struct {
		ids     map[string]bool // false once a line of the execution records its refusal
		effects map[string]int
		most    int
	}
	keys := map[string]*tally{}
	for _, e := range effects {
		if malformedEffect(e) {
			continue
		}
		t := keys[e.Key]
		if t == nil {
			t = &tally{ids: map[string]bool{}, effects: map[string]int{}}
			keys[e.Key] = t
		}
		if e.Execution != "" {
			// A refusal may come on a line of its own, after the effect's.
			if took, seen := t.ids[e.Execution]; !seen || took {
				t.ids[e.Execution] = !e.Refused
			}
			continue
		}
		if e.Refused {
			continue
		}
		t.effects[e.Effect]++
		t.most = max(t.most, t.effects[e.Effect])
	}
	out := make(map[string]int, len(keys))
	for key, t := range keys {
		n := 0
		for _, took := range t.ids {
			if took {
				n++
			}
		}
		out[key] = n + t.most
	}
	return out
}

// keyTally counts the keys by what they allow a count to have grown by:
// those whose final answer was a success (2xx or 3xx) ran exactly once
// (passed, or only the probe in doubt) or, unproven, once at least (more
// would show in the count); those sent that ended otherwise (a 4xx, a 5xx,
// timeouts: no final answer or a refusal) are not expected to have run,
// nor not to have: at most once.
type keyTally struct{ once, unproven, maybe, failed int }

func (c *checker) keyTally() keyTally {
	var t keyTally
	for i := range c.verdicts {
		kv := &c.verdicts[i]
		switch {
		case kv.class == classFailed:
			t.failed++
		case kv.final && succeeded(kv.finalStatus) && kv.unproven:
			t.unproven++
		case kv.final && succeeded(kv.finalStatus):
			t.once++
		case kv.sent:
			t.maybe++
		}
	}
	return t
}

// succeeded reports whether a final answer's status says the operation
// took: 2xx or 3xx.
func succeeded(status int) bool { return status >= 200 && status < 400 }

// judgeCounts checks every count read against the operations, and lets
// the counts decide the unproven keys: when every count whose operations
// make side effects grew by exactly the least the keys allow, each
// unproven key ran once.
func (c *checker) judgeCounts() {
	s, rep := c.s, c.rep
	if len(s.Counts) == 0 {
		return
	}
	t := c.keyTally()
	exact, judged := true, false
	for _, f := range s.Counts {
		cnt := Count{URL: s.CountURL, Field: f.Field, Want: f.Want, Operations: rep.Keys}
		if r, ok := c.h.Counts[f.Field]; ok {
			cnt.Before, cnt.After, cnt.Read, cnt.Error = r.Before, r.After, r.Read, r.Error
		} else {
			cnt.Before = c.h.Header.CountsBefore[f.Field]
			if !interruptedHistory(c.h) {
				cnt.Error = "the history has no reading after the storm"
			}
		}
		cnt.ran, cnt.maybe, cnt.failed = t.once+t.unproven, t.maybe, t.failed
		cnt.Min = int64(f.Want) * int64(t.once+t.unproven)
		cnt.Max = cnt.Min + int64(f.Want)*int64(t.maybe)
		if f.Want > 0 {
			judged = true
			exact = exact && cnt.Read && cnt.Delta() == cnt.Min
		}
		rep.Counts = append(rep.Counts, cnt)
	}
	if len(rep.Counts) > 0 {
		rep.Count = &rep.Counts[0]
	}
	if t.unproven > 0 && judged && exact {
		for i := range c.verdicts {
			if kv := &c.verdicts[i]; kv.unproven {
				kv.resolve()
				c.resolvedByCount++
			}
		}
	}
}

// interruptedHistory reports whether h ends short of its counts' line.
func interruptedHistory(h *History) bool {
	return h.End == nil || h.End.Interrupted || h.End.Error != ""
}

// tally counts the keys by class, lists those that did not pass, and
// fills in the rules' results.
func (c *checker) tally() {
	rep := c.rep
	results := make([]RuleResult, len(rules))
	index := map[string]int{}
	for i, name := range rules {
		results[i].Name = name
		index[name] = i
	}
	list := func(to *[]Failure, f Failure) {
		if c.maxList < 0 || len(*to) < c.maxList {
			*to = append(*to, f)
		}
	}
	example := func(r *RuleResult, key string) {
		if c.maxList < 0 || len(r.Keys) < c.maxList {
			r.Keys = append(r.Keys, key)
		}
	}
	for i := range c.verdicts {
		kv := &c.verdicts[i]
		key := c.units[i].Key
		switch kv.class {
		case classPassed:
			rep.KeysPassed++
			if kv.failure.Originals == 0 {
				rep.ReplayOnly++
			}
		case classFailed:
			rep.KeysFailed++
			list(&rep.Failures, kv.failure)
		default:
			rep.KeysInconclusive++
			if kv.unproven {
				rep.KeysUnproven++
			}
			list(&rep.Inconclusive, kv.failure)
		}
		if kv.rule != "" {
			r := &results[index[kv.rule]]
			if kv.class == classFailed {
				r.Failed++
			} else {
				r.Inconclusive++
			}
			example(r, key)
		}
		if kv.setAside > 0 {
			r := &results[index[RuleRetriesNotFinal]]
			switch kv.class {
			case classPassed:
				r.Passed++
			case classFailed:
				r.Failed++
			default:
				r.Inconclusive++
			}
			example(r, key)
		}
	}
	results[index[RuleAtMostOnce]].Passed = c.resolvedByCount + c.resolvedByLedger
	rep.Rules = results
}
