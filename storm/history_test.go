package storm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A load-mode history of n operations scheduled every 100ms.
func loadHistory(ops ...[]Attempt) *History {
	h := burst(ops...)
	s := &h.Header.Settings
	s.Mode, s.Rate, s.Duration, s.MaxInFlight, s.Retries = modeLoad, 10, time.Duration(len(ops))*100*time.Millisecond, 100, 3
	s.Timeout = 2 * time.Second
	for i := range h.Operations {
		op := &h.Operations[i]
		op.Scheduled = time.Duration(i) * 100 * time.Millisecond
		op.Ended = op.Scheduled
		for j := range op.Attempts {
			a := &op.Attempts[j]
			a.Sent += op.Scheduled
			a.Done += op.Scheduled
			if !a.Probe {
				op.Ended = max(op.Ended, a.Done)
			}
		}
	}
	return h
}

func TestHistoryRoundTrip(t *testing.T) {
	h := loadHistory(
		[]Attempt{att(ClassTimeout, 0, "", 0, 100).retried(), att(ClassOriginal, 201, `{"id":"é\"\\\n"}`, 110, 120).number(2),
			att(ClassReplay, 201, `{"id":"é\"\\\n"}`, 900, 901).probe()},
		[]Attempt{att(ClassServerError, 500, "boom\x01", 0, 5).retried(), att(ClassReplay, 201, "x", 50, 60).number(2).oversize()},
		nil,
	)
	h.Operations[2].Late = true
	h.Header.Settings.CountURL = "http://127.0.0.1:1/stats"
	h.Header.Settings.Counts = []CountSpec{{Field: "charges", Want: 1}, {Field: "emails", Want: 0}}
	h.Header.CountsBefore = map[string]int64{"charges": 5, "emails": 7}
	h.Counts = map[string]CountReading{"charges": {Before: 5, After: 7, Read: true}, "emails": {Before: 7, Error: "GET: status 500"}}
	h.End = &End{Elapsed: 1500 * time.Millisecond, ProbeElapsed: 3 * time.Millisecond}
	h.Header.Started = time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)

	var buf bytes.Buffer
	n, err := h.WriteTo(&buf)
	require.NoError(t, err)
	require.Equal(t, int64(buf.Len()), n)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Regexp(t, `^\{"history":1,"url":"http://127.0.0.1:1/pay","method":"POST","started":"2026-01-02T03:04:05.123456789Z","config":\{"mode":"load",`, lines[0])
	require.Equal(t, `{"op":0,"key":"key-0","copy":0,"attempt":1,"sent_ns":0,"done_ns":100000000,"class":"timeout","status":0,"replayed":false,"body_sha256":"","retried":true,"probe":false,"error":"timeout: no answer"}`, lines[1])
	require.Equal(t, `{"counts":{"charges":{"before":5,"after":7},"emails":{"before":7,"error":"GET: status 500"}}}`, lines[len(lines)-1])

	got, err := ReadHistory(&buf)
	require.NoError(t, err)
	require.Equal(t, h, got)

	// The same report from the history and from what was read back.
	want, gotRep := check(t, h), check(t, got)
	require.Equal(t, want, gotRep)
}

func TestHistoryWritesInvalidUTF8AsJSONDoes(t *testing.T) {
	require.Equal(t, `"a\ufffdb\u0000\u007f"`, string(appendJSONString(nil, "a\xffb\x00\x7f")))
}

func TestReadHistoryCutShortIsInterrupted(t *testing.T) {
	h := burst([]Attempt{att(ClassOriginal, 201, "a", 0, 10)}, []Attempt{att(ClassOriginal, 201, "b", 0, 10)})
	var buf bytes.Buffer
	_, err := h.WriteTo(&buf)
	require.NoError(t, err)
	full := buf.String()
	cut := full[:strings.Index(full, `{"end"`)+5] // the end line, cut mid-way
	got, err := ReadHistory(strings.NewReader(cut))
	require.NoError(t, err)
	require.Nil(t, got.End)
	require.Len(t, got.Operations, 2)
	rep := check(t, got)
	require.True(t, rep.Interrupted)
	require.Equal(t, VerdictInconclusive, rep.Verdict())
}

func TestReadHistoryRejects(t *testing.T) {
	header := `{"history":1,"url":"http://x/","method":"POST","started":"2026-01-02T03:04:05Z","config":{"mode":"burst","keys":2,"dups":1,"timeout_ns":1}}` + "\n"
	attempt := func(s string) string {
		return header + s + "\n"
	}
	for name, in := range map[string]string{
		"empty":              "",
		"no header":          `{"op":0,"key":"k","attempt":1}` + "\n",
		"a later version":    strings.Replace(header, `"history":1`, `"history":2`, 1),
		"a bad mode":         strings.Replace(header, `"burst"`, `"soak"`, 1),
		"no keys":            strings.Replace(header, `"keys":2`, `"keys":0`, 1),
		"a bad start":        strings.Replace(header, `2026-01-02T03:04:05Z`, `yesterday`, 1),
		"op out of range":    attempt(`{"op":2,"key":"k","copy":0,"attempt":1,"class":"original"}`),
		"negative op":        attempt(`{"op":-1,"key":"k","copy":0,"attempt":1,"class":"original"}`),
		"attempt 0":          attempt(`{"op":0,"key":"k","copy":0,"attempt":0,"class":"original"}`),
		"copy out of range":  attempt(`{"op":0,"key":"k","copy":1,"attempt":1,"class":"original"}`),
		"an unknown class":   attempt(`{"op":0,"key":"k","copy":0,"attempt":1,"class":"great"}`),
		"done before sent":   attempt(`{"op":0,"key":"k","copy":0,"attempt":1,"class":"original","sent_ns":5,"done_ns":4}`),
		"negative sent":      attempt(`{"op":0,"key":"k","copy":0,"attempt":1,"class":"original","sent_ns":-5,"done_ns":4}`),
		"done in 31 days":    attempt(`{"op":0,"key":"k","copy":0,"attempt":1,"class":"original","sent_ns":5,"done_ns":2678400000000000}`),
		"done at the max":    attempt(`{"op":0,"key":"k","copy":0,"attempt":1,"class":"original","sent_ns":0,"done_ns":9223372036854775807}`),
		"scheduled in 31 d":  attempt(`{"op":0,"key":"k","scheduled_ns":2678400000000000,"ended_ns":2678400000000000}`),
		"negative ended":     attempt(`{"op":0,"key":"k","scheduled_ns":0,"ended_ns":-1}`),
		"elapsed in 31 days": attempt(`{"end":{"elapsed_ns":2678400000000000}}`),
		"negative probe":     attempt(`{"end":{"probe_elapsed_ns":-1}}`),
		"a short digest":     attempt(`{"op":0,"key":"k","copy":0,"attempt":1,"class":"original","body_sha256":"abcd"}`),
		"two keys for an op": attempt(`{"op":0,"key":"k","copy":0,"attempt":1,"class":"original"}` + "\n" + `{"op":0,"key":"j","copy":0,"attempt":2,"class":"original"}`),
		"a stranger line":    attempt(`{"hello":"world"}`),
		"not JSON mid-way":   attempt(`not json` + "\n" + `{"end":{}}`),
		"two headers":        attempt(header[:len(header)-1]),
		"two ends":           attempt(`{"end":{}}` + "\n" + `{"end":{}}`),
		"a huge line":        attempt(`{"op":0,"key":"` + strings.Repeat("k", maxHistoryLine) + `"}`),
		"keys x dups huge":   strings.Replace(header, `"dups":1`, `"dups":100000000`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ReadHistory(strings.NewReader(in))
			require.Error(t, err)
			if name != "a huge line" {
				require.True(t, errors.Is(err, ErrHistory), "%v", err)
			}
			if strings.Contains(name, "days") || strings.Contains(name, "negative") || strings.Contains(name, "max") || strings.Contains(name, " 31 ") {
				require.ErrorContains(t, err, "line 2: ", "names the line")
			}
		})
	}
}

func TestReadLedger(t *testing.T) {
	in := `{"key":"a","effect":"charge"}
{"key":"a","effect":"email","execution":7,"attempt":2,"token":"t1","refused":true}

{"key":"b"}
`
	got, err := ReadLedger(strings.NewReader(in))
	require.NoError(t, err)
	require.Equal(t, []Effect{{Key: "a", Effect: "charge"}, {Key: "a", Effect: "email", Execution: "7", Attempt: 2, Token: "t1", Refused: true},
		{Key: "b"}}, got)
	for name, bad := range map[string]string{"not an object": `[1]`, "cut short": `{"key":"a"`, "not JSON": `key=a`,
		"a number": `1`} {
		_, err := ReadLedger(strings.NewReader(bad))
		require.ErrorIs(t, err, ErrHistory, name)
	}
	// Objects without a usable key are kept, malformed: Check makes the
	// verdict inconclusive (they were refused before).
	for name, malformed := range map[string]string{"no key": `{"effect":"charge"}`, "a null key": `{"key":null}`,
		"a key that is a number": `{"key":1}`, "a token that is an object": `{"key":"a","token":{}}`} {
		got, err := ReadLedger(strings.NewReader(malformed + "\n"))
		require.NoError(t, err, name)
		require.Equal(t, []Effect{{}}, got, name)
	}
	require.Equal(t, map[string]int{"a": 1, "b": 1, "c": 2, "d": 3}, ledgerExecutions([]Effect{
		{Key: "a", Effect: "charge"}, {Key: "a", Effect: "email"}, {Key: "a", Effect: "charge", Refused: true},
		{Key: "b"},
		{Key: "c", Execution: "1", Effect: "charge"}, {Key: "c", Execution: "1", Effect: "email"}, {Key: "c", Execution: "2"},
		{Key: "d", Effect: "charge"}, {Key: "d", Effect: "charge"}, {Key: "d", Effect: "charge"},
	}))
}

func TestMergeHistoriesAlignsClocksAndCounts(t *testing.T) {
	a := loadHistory([]Attempt{att(ClassOriginal, 201, "a", 0, 10)}, []Attempt{att(ClassOriginal, 201, "b", 0, 10)})
	b := loadHistory([]Attempt{att(ClassOriginal, 201, "c", 0, 10)})
	b.Operations[0].Key = "b-0" // another generator's key
	b.Header.Started = a.Header.Started.Add(1500 * time.Millisecond)
	a.End = &End{Elapsed: time.Second}
	b.End = &End{Elapsed: time.Second, ProbeElapsed: 10 * time.Millisecond}
	for _, h := range []*History{a, b} {
		h.Header.Settings.CountURL = "http://127.0.0.1:1/stats"
		h.Header.Settings.Counts = []CountSpec{{Field: "charges", Want: 1}}
	}
	// Both read the one counter: a before anything was sent, b after
	// everything ended.
	a.Counts = map[string]CountReading{"charges": {Before: 10, After: 12, Read: true}}
	b.Counts = map[string]CountReading{"charges": {Before: 12, After: 13, Read: true}}

	m, err := MergeHistories(b, a) // in any order
	require.NoError(t, err)
	require.Equal(t, a.Header.Started, m.Header.Started)
	require.Equal(t, 3, m.Header.Settings.Keys)
	require.Equal(t, 20.0, m.Header.Settings.Rate)
	require.Equal(t, 1500*time.Millisecond+100*time.Millisecond, m.Header.Settings.Duration)
	require.Equal(t, []int{0, 1, 2}, []int{m.Operations[0].Op, m.Operations[1].Op, m.Operations[2].Op})
	require.Equal(t, "b-0", m.Operations[0].Key, "b's operation comes first, shifted")
	require.Equal(t, 1500*time.Millisecond, m.Operations[0].Attempts[0].Sent)
	require.Equal(t, 1, m.Operations[1].Attempts[0].Op)
	require.Equal(t, map[string]CountReading{"charges": {Before: 10, After: 13, Read: true}}, m.Counts)
	require.Equal(t, &End{Elapsed: 2500 * time.Millisecond, ProbeElapsed: 10 * time.Millisecond}, m.End)
	require.Equal(t, time.Duration(0), b.Operations[0].Attempts[0].Sent, "the inputs are not modified")

	rep := check(t, m)
	require.Equal(t, VerdictPass, rep.Verdict())
	require.Equal(t, int64(3), rep.Count.Delta())

	c := loadHistory([]Attempt{att(ClassOriginal, 201, "c", 0, 10)})
	c.Header.Settings.Dups = 2
	_, err = MergeHistories(a, c)
	require.ErrorIs(t, err, ErrHistory)
	_, err = MergeHistories()
	require.ErrorIs(t, err, ErrHistory)
	late := loadHistory([]Attempt{att(ClassOriginal, 201, "c", 0, 10)})
	late.Header.Started = a.Header.Started.Add(31 * 24 * time.Hour)
	_, err = MergeHistories(a, late)
	require.ErrorIs(t, err, ErrHistory, "times over 30 days apart")
}

func TestCheckGroupsAKeysAttemptsAcrossOperationsAndHistories(t *testing.T) {
	// Two load generators sent the same key, and each got an original:
	// the key ran twice. Judged operation by operation, each passed.
	a := loadHistory([]Attempt{att(ClassOriginal, 201, "a", 0, 10)})
	b := loadHistory([]Attempt{att(ClassOriginal, 201, "a", 0, 10)})
	b.Header.Started = a.Header.Started.Add(5 * time.Millisecond)
	m, err := MergeHistories(a, b)
	require.NoError(t, err)
	rep := check(t, m)
	require.Equal(t, VerdictFail, rep.Verdict())
	require.Equal(t, 1, rep.Keys, "one key, whatever the operations that sent it")
	require.Equal(t, 1, rep.KeysFailed)
	require.Equal(t, RuleAtMostOnce, rep.Failures[0].Rule)
	require.Contains(t, rep.Failures[0].Reason, "executed 2 times")
	require.Len(t, a.Operations[0].Attempts, 1, "the inputs are not modified")
	require.Len(t, m.Operations[0].Attempts, 1)

	// One history, two operations of one key: the second's replay, sent
	// after the first's lost attempt, makes the key pass on one execution
	// (the lost attempt's), judged together.
	h := burst(
		[]Attempt{att(ClassTimeout, 0, "", 0, 100)},
		[]Attempt{att(ClassReplay, 201, "a", 150, 160), att(ClassReplay, 201, "a", 300, 301).probe()},
	)
	h.Operations[1].Key = h.Operations[0].Key
	for j := range h.Operations[1].Attempts {
		h.Operations[1].Attempts[j].Key = h.Operations[0].Key
	}
	rep = checkSaved(t, h)
	require.Equal(t, VerdictPass, rep.Verdict(), "%+v", rep.Inconclusive)
	require.Equal(t, 1, rep.KeysPassed)
	require.Equal(t, 1, rep.Keys)
}

func TestCheckCountsSpeakInOperations(t *testing.T) {
	keys := [][]Attempt{}
	for range 4 {
		keys = append(keys, []Attempt{att(ClassOriginal, 201, "a", 0, 10), att(ClassReplay, 201, "a", 20, 21).probe()})
	}
	counts := func(charges, emails, refunds int64) *History {
		h := burst(keys...)
		h.Header.Settings.CountURL = "http://127.0.0.1:1/stats"
		h.Header.Settings.Counts = []CountSpec{{Field: "charges", Want: 1}, {Field: "emails", Want: 2}, {Field: "refunds", Want: 0}}
		h.Counts = map[string]CountReading{"charges": {Before: 1000, After: 1000 + charges, Read: true},
			"emails": {After: emails, Read: true}, "refunds": {After: refunds, Read: true}}
		return h
	}
	rep := check(t, counts(4, 8, 0))
	require.Equal(t, VerdictPass, rep.Verdict())
	require.Len(t, rep.Counts, 3)
	require.Same(t, &rep.Counts[0], rep.Count)
	require.Equal(t, "emails: 4 operations, 8 emails (2.00 each; want 2) = 8 for 4 keys that ran; 0 before, 8 after", rep.Counts[1].String())

	rep = check(t, counts(4, 9, 1))
	require.Equal(t, VerdictFail, rep.Verdict())
	require.Equal(t, "emails: 4 operations, 9 emails (2.25 each; want 2) != 8 for 4 keys that ran; 0 before, 9 after", rep.Counts[1].String())
	require.Equal(t, []string{"emails grew by 9 for 4 operations, want 8", "refunds grew by 1 for 4 operations, want 0"}, rep.failWhy())

	var j bytes.Buffer
	require.NoError(t, rep.WriteJSON(&j))
	require.Contains(t, j.String(), `"counts":{"charges":{"before":1000,"after":1004,"delta":4,"want":1,"operations":4,"each":1,"min":4,"max":4,"ok":true},"emails":{"before":0,"after":9,"delta":9,"want":2,"operations":4,"each":2.25,"min":8,"max":8,"ok":false}`)
	require.Contains(t, j.String(), `"count":{"url":"http://127.0.0.1:1/stats","field":"charges","before":1000,"after":1004,"delta":4,"want":4,"want_max":4}`)

	// A key sent without a final answer may have run, once.
	h := counts(5, 10, 0)
	h.Header.Settings.Keys++
	h.Operations = append(h.Operations, Operation{Op: 4, Key: "lost", Attempts: []Attempt{att(ClassTimeout, 0, "", 0, 100)}})
	rep = check(t, h)
	require.Equal(t, VerdictInconclusive, rep.Verdict())
	require.Equal(t, "charges: 5 operations, 5 charges (1.00 each; want 1) within 4 to 5 for 4 keys that ran and 1 that may have; 1,000 before, 1,005 after",
		rep.Counts[0].String())
}

func TestCheckLoadFigures(t *testing.T) {
	var ops [][]Attempt
	// Second 0: ten operations, one attempt each; second 1: ten more,
	// two timed out and retried twice each, then replayed.
	for i := range 20 {
		as := []Attempt{att(ClassOriginal, 201, "a", 0, 10)}
		if i >= 10 && i < 12 {
			as = []Attempt{att(ClassTimeout, 0, "", 0, 50).retried(), att(ClassInProgress, 409, "", 60, 61).number(2).retried(),
				att(ClassReplay, 201, "a", 70, 80).number(3)}
		}
		ops = append(ops, as)
	}
	// One more, never started.
	ops = append(ops, nil)
	h := loadHistory(ops...)
	rep := check(t, h)
	ld := rep.Load
	require.Equal(t, Operations{Scheduled: 21, Started: 20, Completed: 20, NotStarted: 1}, ld.Operations)
	require.Equal(t, 24, ld.Attempts)
	require.Equal(t, 1.2, ld.Amplification)
	require.InDelta(t, 14.0/10, ld.PeakAmplification, 1e-9)
	require.Equal(t, 1, ld.PeakSecond)
	require.Equal(t, 2*time.Second, ld.Latency.Max, "the operation that never started took the whole timeout")
	require.Equal(t, 2*time.Second, ld.Timeline[2].P99)
	require.InDelta(t, 20/2.1, ld.Goodput, 1e-9)
	require.InDelta(t, 20/2.1, ld.ExactlyOnceGoodput, 1e-9)

	// Two keys that ran twice: completed, but not exactly once.
	h.Operations[0].Attempts = append(h.Operations[0].Attempts, att(ClassOriginal, 201, "a", 5, 15).onCopy(0))
	h.Operations[1].Attempts = append(h.Operations[1].Attempts, att(ClassOriginal, 201, "a", 105, 115))
	h.Header.Settings.MinExactlyOnceGoodput, h.Header.Settings.MaxPeakAmplification = 9, 1.3
	rep = check(t, h)
	require.InDelta(t, 18/2.1, rep.Load.ExactlyOnceGoodput, 1e-9)
	require.Equal(t, []Threshold{
		{Name: "min-exactly-once-goodput", Limit: 9, Value: 8.571, OK: false},
		{Name: "max-peak-amplification", Limit: 1.3, Value: 1.4, OK: false},
	}, rep.Thresholds)
	require.Equal(t, 1, rep.ExitCode())
}

func TestPeakAmplificationCountsTheRetriesOfTheOperationsScheduledInASecond(t *testing.T) {
	// Second 0: ten operations, one attempt each. Second 1: ten whose
	// first attempt timed out and whose two retries were sent in the
	// seconds after: three attempts each, for the operations of second 1.
	// Counted by the second the attempts were sent, second 1 had ten
	// attempts for ten operations (1.0) and the retries fell in seconds
	// without operations: the slow second did not show.
	var ops [][]Attempt
	for i := range 20 {
		as := []Attempt{att(ClassOriginal, 201, "a", 0, 10)}
		if i >= 10 {
			as = []Attempt{att(ClassTimeout, 0, "", 0, 200).retried(), att(ClassTimeout, 0, "", 1100, 1300).number(2).retried(),
				att(ClassOriginal, 201, "a", 1400, 1410).number(3)}
		}
		ops = append(ops, as)
	}
	rep := check(t, loadHistory(ops...))
	ld := rep.Load
	require.Equal(t, 40, ld.Attempts)
	require.Equal(t, 2.0, ld.Amplification)
	require.Equal(t, 3.0, ld.PeakAmplification)
	require.Equal(t, 1, ld.PeakSecond)
	a, ok := ld.Timeline[0].Amplification()
	require.True(t, ok)
	require.Equal(t, 1.0, a)
	require.Equal(t, 30, ld.Timeline[1].OperationAttempts)
	require.Equal(t, 10, ld.Timeline[1].Attempts, "attempts by class stay in the second they were sent")
	_, ok = ld.Timeline[2].Amplification()
	require.False(t, ok, "no operation scheduled in second 2")
}

func TestThresholdsPrintDurationsAsLatenciesAre(t *testing.T) {
	th := Threshold{Name: "max-p99", Limit: 2000, Value: 4191.479, Unit: "ms"}
	require.Equal(t, "max-p99 4.19s > 2.00s", th.String())
	th = Threshold{Name: "max-p99", Limit: 2000, Value: 2004.2, Unit: "ms"}
	require.Equal(t, "max-p99 2.0042s > 2s", th.String(), "more digits where the short forms would read the same")
	th = Threshold{Name: "min-goodput", Limit: 50, Value: 49.5}
	require.Equal(t, "min-goodput 49.5 < 50", th.String())
}

// flakyServer is a correct idempotent endpoint whose first attempt of
// every third key answers 500 (and releases the key), and whose first
// attempt of every fifth key is held until the key's retry has arrived (the
// client gave up on it first: a timeout whatever the machine's speed).
type flakyServer struct {
	*idempotentServer
	mu      sync.Mutex
	seen    map[string]int
	retried map[string]chan struct{}
}

func (s *flakyServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.seen[key]++
	first := s.seen[key] == 1
	ch, ok := s.retried[key]
	if !ok {
		ch = make(chan struct{})
		s.retried[key] = ch
	} else if !first && s.seen[key] == 2 {
		close(ch)
	}
	s.mu.Unlock()
	var n int
	_, _ = fmt.Sscanf(string(body), `{"n":%d}`, &n)
	switch {
	case first && n%3 == 0:
		http.Error(w, "transient", http.StatusInternalServerError)
		return
	case first && n%5 == 1:
		select { // bounded, so that a broken storm cannot hang the server
		case <-ch:
		case <-time.After(10 * time.Second):
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	s.idempotentServer.ServeHTTP(w, r)
}

// What Run reports is what Check reports on the history Run wrote, read
// back: one implementation of the verdict.
func TestRunHistoryIsJudgedTheSame(t *testing.T) {
	for _, mode := range []string{"burst", "load"} {
		t.Run(mode, func(t *testing.T) {
			fake := &flakyServer{idempotentServer: &idempotentServer{entries: map[string]*entry{}}, seen: map[string]int{},
				retried: map[string]chan struct{}{}}
			srv := httptest.NewServer(fake)
			t.Cleanup(srv.Close)
			var history bytes.Buffer
			cfg := Config{URL: srv.URL, BodyFor: func(_ string, i int) []byte { return fmt.Appendf(nil, `{"n":%d}`, i) },
				History: &history, MaxFailures: -1}
			if mode == "burst" {
				cfg.Keys, cfg.Dups, cfg.Retry = 12, 3, true
			} else {
				cfg.Rate, cfg.Duration, cfg.AttemptTimeout = 40, 500*time.Millisecond, 100*time.Millisecond
				cfg.Policy.BaseDelay, cfg.Policy.MaxDelay = 10*time.Millisecond, 20*time.Millisecond
				cfg.MaxP99 = time.Second
			}
			rep, err := Run(t.Context(), cfg)
			require.NoError(t, err)
			got, err := ReadHistory(&history)
			require.NoError(t, err)
			again := check(t, got)

			var a, b bytes.Buffer
			require.NoError(t, rep.WriteJSON(&a))
			require.NoError(t, again.WriteJSON(&b))
			require.JSONEq(t, a.String(), b.String())
			a.Reset()
			b.Reset()
			require.NoError(t, rep.WriteText(&a))
			require.NoError(t, again.WriteText(&b))
			require.Equal(t, a.String(), b.String())
			if mode == "load" {
				a.Reset()
				b.Reset()
				require.NoError(t, rep.WriteHTML(&a))
				require.NoError(t, again.WriteHTML(&b))
				require.Equal(t, a.String(), b.String())
				require.Positive(t, rep.RetriedServerErrors, "the 500s were retried")
				require.Positive(t, rep.Timeouts)
			}
		})
	}
}

// failingWriter fails every write after the first n bytes.
type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		return w.n, errors.New("disk full")
	}
	w.n -= len(p)
	return len(p), nil
}

func TestRunReportsAHistoryItCouldNotWrite(t *testing.T) {
	srv, _ := newIdempotentServer(t)
	rep, err := Run(t.Context(), Config{URL: srv.URL, Keys: 3, Dups: 2, History: &failingWriter{n: 10}})
	require.ErrorIs(t, err, ErrHistory)
	require.ErrorContains(t, err, "disk full")
	require.NotNil(t, rep, "the storm still ran")
	require.Equal(t, VerdictPass, rep.Verdict())
}

// An interrupted storm's history ends with an end line that says so, and
// no counts: re-checked, it is the storm's interrupted report.
func TestInterruptedStormsHistoryIsJudgedTheSame(t *testing.T) {
	started := make(chan struct{})
	var once sync.Once
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stats" {
			_, _ = io.WriteString(w, `{"charges": 7}`)
			return
		}
		once.Do(func() { close(started) })
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-started
		cancel()
	}()
	var history bytes.Buffer
	rep, err := Run(ctx, Config{URL: srv.URL + "/pay", Rate: 50, Duration: time.Minute, History: &history,
		CountURL: srv.URL + "/stats", CountField: "charges"})
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, rep.Interrupted)
	require.Contains(t, history.String(), `"interrupted":true`)
	require.NotContains(t, history.String(), `{"counts":`)

	got, err := ReadHistory(&history)
	require.NoError(t, err)
	again := check(t, got)
	require.Equal(t, int64(7), again.Count.Before, "the count before, from the header")
	var a, b bytes.Buffer
	require.NoError(t, rep.WriteJSON(&a))
	require.NoError(t, again.WriteJSON(&b))
	require.JSONEq(t, a.String(), b.String())
}

// A history written by hand may leave the numbers of keys and copies to
// its operations.
func TestCheckTakesAHistoryWithoutCounts(t *testing.T) {
	h := loadHistory([]Attempt{att(ClassOriginal, 201, "a", 0, 10)}, []Attempt{att(ClassOriginal, 201, "b", 0, 10)})
	h.Header.Settings.Keys, h.Header.Settings.Dups = 0, 0
	rep := check(t, h)
	require.Equal(t, 2, rep.Keys)
	require.Equal(t, 2, rep.Load.Operations.Completed)
	require.Equal(t, VerdictPass, rep.Verdict())
}
