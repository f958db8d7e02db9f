package storm

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Histories written by hand, as porcupine's tests write theirs: each rule
// is shown deciding a key that no other rule decides.

func msec(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// att is an attempt of copy 0, number 1, sent and done at the given
// milliseconds; body is its body (for an answered class).
func att(c Class, status int, body string, sent, done int) Attempt {
	a := Attempt{Class: c, Status: status, Sent: msec(sent), Done: msec(done), Attempt: 1, Replayed: c == ClassReplay}
	if c.Answered() {
		a.BodySHA256, a.Size, a.Snippet = sha256.Sum256([]byte(body)), int64(len(body)), body
	} else {
		a.Status, a.Error = 0, string(c)+": no answer"
	}
	return a
}

func (a Attempt) retried() Attempt     { a.Retried = true; return a }
func (a Attempt) probe() Attempt       { a.Probe = true; return a }
func (a Attempt) number(n int) Attempt { a.Attempt = n; return a }
func (a Attempt) oversize() Attempt    { a.Oversize = true; return a }
func (a Attempt) onCopy(c int) Attempt { a.Copy = c; return a }

// burst returns a finished burst-mode history of one key per attempt list.
func burst(keys ...[]Attempt) *History {
	h := &History{
		Header: Header{Version: HistoryVersion, URL: "http://127.0.0.1:1/pay", Method: "POST",
			Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
			Settings: Settings{Mode: modeBurst, KeyHeader: headerIdempotencyKey, Keys: len(keys), Dups: 1, Concurrency: 1,
				Timeout: 10 * time.Second, Probe: true, MaxFailures: 10}},
		End: &End{Elapsed: time.Second},
	}
	for i, as := range keys {
		key := fmt.Sprintf("key-%d", i)
		op := Operation{Op: i, Key: key}
		for _, a := range as {
			a.Op, a.Key = i, key
			h.Header.Settings.Dups = max(h.Header.Settings.Dups, a.Copy+1)
			op.Attempts = append(op.Attempts, a)
		}
		h.Operations = append(h.Operations, op)
	}
	return h
}

// withCount adds a count of charges that grew by delta, one per operation.
func withCount(h *History, delta int64) *History {
	h.Header.Settings.CountURL = "http://127.0.0.1:1/stats"
	h.Header.Settings.Counts = []CountSpec{{Field: "charges", Want: 1}}
	h.Counts = map[string]CountReading{"charges": {Before: 100, After: 100 + delta, Read: true}}
	return h
}

// decidedBy returns the rules that decided something in rep.
func decidedBy(rep *Report) []string {
	var out []string
	for _, r := range rep.Rules {
		if r.Failed+r.Inconclusive+r.Passed > 0 {
			out = append(out, r.Name)
		}
	}
	return out
}

func check(t *testing.T, h *History) *Report {
	t.Helper()
	rep, err := Check(h)
	require.NoError(t, err)
	return rep
}

// checkSaved is check, and holds that 'idemkey check' on the history
// saved to a file (and the ledger, if any) gives the same report and exit
// status.
func checkSaved(t *testing.T, h *History) *Report {
	t.Helper()
	rep := check(t, h)
	dir := t.TempDir()
	path := filepath.Join(dir, "history.jsonl")
	f, err := os.Create(path)
	require.NoError(t, err)
	_, err = h.WriteTo(f)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	args := []string{path, "--json"}
	if h.Ledger != nil {
		var ledger strings.Builder
		for _, e := range h.Ledger {
			fmt.Fprintf(&ledger, "{\"key\":%q,\"effect\":%q}\n", e.Key, e.Effect)
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, "ledger.jsonl"), []byte(ledger.String()), 0o600))
		args = append(args, "--ledger", filepath.Join(dir, "ledger.jsonl"))
	}
	var stdout, stderr, want strings.Builder
	code := CheckCommand(args, &stdout, &stderr)
	require.NoError(t, rep.WriteJSON(&want))
	require.Equal(t, rep.ExitCode(), code, stderr.String())
	require.JSONEq(t, want.String(), stdout.String())
	return rep
}

// requireDecided holds that only rule decided anything, and that the one
// key it failed or left inconclusive names it, with reason.
func requireDecided(t *testing.T, rep *Report, rule, verdict, reason string) {
	t.Helper()
	require.Equal(t, verdict, rep.Verdict())
	require.Equal(t, []string{rule}, decidedBy(rep))
	var keys []Failure
	keys = append(append(keys, rep.Failures...), rep.Inconclusive...)
	if verdict == VerdictPass {
		require.Empty(t, keys)
		return
	}
	require.Len(t, keys, 1)
	require.Equal(t, rule, keys[0].Rule)
	require.Contains(t, keys[0].Reason, reason)
	text := new(strings.Builder)
	require.NoError(t, rep.WriteText(text))
	require.Contains(t, text.String(), "["+rule+"] ")
	require.Contains(t, text.String(), "rules          "+rule+": ")
}

func TestRuleAtMostOnceFailsTwoExecutions(t *testing.T) {
	rep := checkSaved(t, burst([]Attempt{
		att(ClassOriginal, 201, "a", 0, 10),
		att(ClassOriginal, 201, "a", 5, 15).onCopy(1),
		att(ClassReplay, 201, "a", 100, 101).probe(),
	}))
	requireDecided(t, rep, RuleAtMostOnce, VerdictFail, "executed 2 times (201 x2 without Idempotent-Replayed: true)")
}

func TestRuleAtMostOnceUnprovenAfterALostAttempt(t *testing.T) {
	// The first attempt timed out, and may have run (it may still be
	// running); the retry ran it: once or twice, the answers cannot tell.
	attempts := []Attempt{
		att(ClassTimeout, 0, "", 0, 100).retried(),
		att(ClassOriginal, 201, "a", 110, 120).number(2),
		att(ClassReplay, 201, "a", 200, 201).probe(),
	}
	rep := checkSaved(t, burst(attempts))
	requireDecided(t, rep, RuleAtMostOnce, VerdictInconclusive,
		"unproven: 1 execution, and 1 lost attempt (timeout sent at 0s) that may have run too")
	require.Equal(t, 1, rep.KeysUnproven)
	require.Contains(t, rep.countNote(), "1 keys unproven")

	t.Run("a count that grew by one proves it ran once", func(t *testing.T) {
		rep := checkSaved(t, withCount(burst(attempts), 1))
		requireDecided(t, rep, RuleAtMostOnce, VerdictPass, "")
		require.Equal(t, 1, rep.Rules[0].Passed)
		require.Zero(t, rep.KeysUnproven)
	})
	t.Run("a count that grew by two fails it", func(t *testing.T) {
		rep := checkSaved(t, withCount(burst(attempts), 2))
		require.Equal(t, VerdictFail, rep.Verdict())
		require.Equal(t, 1, rep.KeysUnproven, "a total cannot say which key ran twice")
		require.Equal(t, []string{"charges grew by 2 for 1 operations, want 1"}, rep.failWhy())
	})
	t.Run("a ledger with one execution proves it", func(t *testing.T) {
		h := burst(attempts)
		h.Ledger = []Effect{{Key: "key-0", Effect: "charge"}}
		rep := checkSaved(t, h)
		requireDecided(t, rep, RuleAtMostOnce, VerdictPass, "")
		require.Equal(t, &LedgerSummary{Effects: 1, Keys: 1}, rep.Ledger)
	})
	t.Run("a ledger with no execution leaves it unproven", func(t *testing.T) {
		// It passed before: at most one execution was enough.
		h := burst(attempts)
		h.Ledger = []Effect{}
		rep := checkSaved(t, h)
		requireDecided(t, rep, RuleAtMostOnce, VerdictInconclusive, "the ledger shows no execution; unproven: ")
		require.Equal(t, 1, rep.KeysUnproven)
	})
	t.Run("a ledger with keys the history lacks is inconclusive", func(t *testing.T) {
		// It passed before, the other key counted and ignored.
		h := burst(attempts)
		h.Ledger = []Effect{{Key: "key-0", Effect: "charge"}, {Key: "other", Effect: "charge"}}
		rep := checkSaved(t, h)
		require.Equal(t, VerdictInconclusive, rep.Verdict())
		require.Zero(t, rep.KeysInconclusive, "the key itself is proven")
		require.Equal(t, 1, rep.Ledger.OtherKeys)
		require.Equal(t, `the ledger disagrees with the history: 1 key not in the history ("other" first)`, rep.Ledger.Disagreement)
		require.Contains(t, rep.inconclusiveWhy(), rep.Ledger.Disagreement)
	})
	t.Run("a malformed ledger is inconclusive", func(t *testing.T) {
		h := burst(attempts)
		h.Ledger = []Effect{{Key: "key-0", Effect: "charge"}, {Key: "", Effect: "charge"}, {Key: "key-0", Effect: "charge", Attempt: -1}}
		rep := check(t, h)
		require.Equal(t, VerdictInconclusive, rep.Verdict())
		require.Equal(t, 2, rep.Ledger.Malformed)
		require.Equal(t, 1, rep.Rules[0].Passed, "the malformed lines are not executions")
		require.Contains(t, rep.Ledger.Disagreement, "2 effects malformed")
	})
	t.Run("a ledger with two executions fails it", func(t *testing.T) {
		h := burst(attempts)
		h.Ledger = []Effect{{Key: "key-0", Effect: "charge"}, {Key: "key-0", Effect: "charge"}}
		requireDecided(t, checkSaved(t, h), RuleAtMostOnce, VerdictFail, "the ledger shows 2 executions")
	})
}

func TestRuleAtMostOnceStoredOnlyOnceAReplayShowsIt(t *testing.T) {
	// The original's answer came at 10ms, the lost attempt was sent at
	// 15ms: the original's answer may have left before its record was
	// stored, so the lost attempt may have run too. Only the replay (done
	// at 40ms) shows the outcome stored. It passed before.
	rep := checkSaved(t, burst([]Attempt{
		att(ClassOriginal, 201, "a", 0, 10),
		att(ClassTransportError, 0, "", 15, 16).onCopy(1).retried(),
		att(ClassReplay, 201, "a", 30, 40).onCopy(1).number(2),
		att(ClassReplay, 201, "a", 100, 101).probe(),
	}))
	requireDecided(t, rep, RuleAtMostOnce, VerdictInconclusive,
		"unproven: 1 execution, and 1 lost attempt (transport error sent at 15.0ms) that may have run too")

	// Sent after the replay's answer: it found the outcome stored.
	rep = checkSaved(t, burst([]Attempt{
		att(ClassOriginal, 201, "a", 0, 10),
		att(ClassReplay, 201, "a", 5, 12).onCopy(1),
		att(ClassTransportError, 0, "", 15, 16).onCopy(1).number(2),
		att(ClassReplay, 201, "a", 100, 101).probe(),
	}))
	require.Equal(t, VerdictPass, rep.Verdict(), "%+v", rep.Inconclusive)
}

func TestCountWantsOnlyTheKeysThatSucceeded(t *testing.T) {
	// One key created (201), one refused (400), one whose every attempt
	// timed out, one that ended with a 500: only the first must have made
	// a charge; the others may have, or not. Before, the refused key was
	// counted as one that ran, and a correct server failed.
	keys := func() *History {
		return burst(
			[]Attempt{att(ClassOriginal, 201, "a", 0, 10), att(ClassReplay, 201, "a", 100, 101).probe()},
			[]Attempt{att(ClassClientError, 400, "bad card", 0, 10)},
			[]Attempt{att(ClassTimeout, 0, "", 0, 10)},
			[]Attempt{att(ClassServerError, 500, "boom", 0, 10)},
		)
	}
	for delta := int64(1); delta <= 4; delta++ {
		rep := checkSaved(t, withCount(keys(), delta))
		require.True(t, rep.Counts[0].OK(), "delta %d: %s", delta, rep.Counts[0].String())
		require.Equal(t, int64(1), rep.Counts[0].Min)
		require.Equal(t, int64(4), rep.Counts[0].Max)
		require.NotEqual(t, VerdictFail, rep.Verdict())
	}
	for _, delta := range []int64{0, 5} {
		rep := checkSaved(t, withCount(keys(), delta))
		require.Equal(t, VerdictFail, rep.Verdict(), "delta %d", delta)
	}
	require.Contains(t, check(t, withCount(keys(), 1)).Counts[0].String(), "within 1 to 4 for 1 key that ran and 3 that may have")
}

func TestRuleAtMostOnceReplaysWithoutAnExecutionAreUnproven(t *testing.T) {
	// The key is fresh: its execution must have been one of the storm's
	// attempts, and none of them ran it or was lost.
	rep := checkSaved(t, burst([]Attempt{
		att(ClassReplay, 201, "a", 0, 10),
		att(ClassReplay, 201, "a", 20, 30).probe(),
	}))
	requireDecided(t, rep, RuleAtMostOnce, VerdictInconclusive, "replayed, never executed: 1 replays and no original")
}

func TestRuleAtMostOnceOneLostAttemptBeforeReplaysIsTheExecution(t *testing.T) {
	// The lost attempt is the only one that can have run it: once.
	rep := checkSaved(t, burst([]Attempt{
		att(ClassTimeout, 0, "", 0, 100).retried(),
		att(ClassInProgress, 409, "busy", 110, 111).number(2).retried(),
		att(ClassReplay, 201, "a", 500, 510).number(3),
		att(ClassReplay, 201, "a", 600, 601).probe(),
	}))
	require.Equal(t, VerdictPass, rep.Verdict())
	require.Empty(t, decidedBy(rep))
	require.Equal(t, 1, rep.ReplayOnly)
}

func TestRuleRetriesNotFinalSetsAsideA5xxStormRetried(t *testing.T) {
	// idemkey releases the key on a 5xx; storm retried it, and the retry
	// ran the request: one execution, one answer.
	retried := burst([]Attempt{
		att(ClassServerError, 500, "boom", 0, 10).retried(),
		att(ClassOriginal, 201, "a", 100, 110).number(2),
		att(ClassReplay, 201, "a", 200, 201).probe(),
	})
	rep := checkSaved(t, retried)
	requireDecided(t, rep, RuleRetriesNotFinal, VerdictPass, "")
	require.Equal(t, RuleResult{Name: RuleRetriesNotFinal, Passed: 1, Keys: []string{"key-0"}}, rep.Rules[1])
	require.Equal(t, 1, rep.RetriedServerErrors)
	require.Contains(t, rep.answers(), "(1 of the 5xx retried by storm: not executions)")

}

func TestRuleA5xxIsNeverAnExecution(t *testing.T) {
	// A 500 that ended one copy while another copy got the 201: idemkey
	// released the key on the 500 and the other copy ran it, one
	// execution, not two (it failed at-most-once before).
	t.Run("a 500 that ended its copy beside a 201", func(t *testing.T) {
		rep := checkSaved(t, burst([]Attempt{
			att(ClassServerError, 500, "boom", 0, 10),
			att(ClassOriginal, 201, "a", 5, 110).onCopy(1),
			att(ClassReplay, 201, "a", 200, 201).probe(),
		}))
		require.Equal(t, VerdictPass, rep.Verdict(), "%+v", rep.Failures)
		require.Equal(t, 1, rep.ServerErrors)
	})
	t.Run("a key whose every answer is a 5xx is inconclusive", func(t *testing.T) {
		rep := checkSaved(t, burst([]Attempt{
			att(ClassServerError, 500, "boom", 0, 10),
			att(ClassServerError, 502, "bad gateway", 5, 15).onCopy(1),
		}))
		requireDecided(t, rep, RuleLiveness, VerdictInconclusive, "no final answer: 2 attempts: 500 server error, 502 server error")
	})
	t.Run("a late probe answered 5xx got no final answer", func(t *testing.T) {
		rep := checkSaved(t, burst([]Attempt{
			att(ClassOriginal, 201, "a", 0, 10),
			att(ClassServerError, 500, "boom", 300, 310).probe(),
		}))
		requireDecided(t, rep, RuleNoLostSuccess, VerdictInconclusive, "late probe got no final answer: 500 not replayed, not final")
		require.Equal(t, 1, rep.Probe.NotFinal)
	})
}

func TestRuleOneAnswerFailsDivergentFinalAnswers(t *testing.T) {
	rep := checkSaved(t, burst([]Attempt{
		att(ClassOriginal, 201, "a", 0, 10),
		att(ClassReplay, 201, "b", 20, 30).onCopy(1),
		att(ClassReplay, 201, "a", 40, 41).probe(),
	}))
	requireDecided(t, rep, RuleOneAnswer, VerdictFail, `divergent: 2 distinct final responses: 201 "a" x1, 201 "b" x1`)
}

func TestRuleNoLostSuccess(t *testing.T) {
	t.Run("the probe ran it again", func(t *testing.T) {
		// The lost attempt ran it (the replay shows it stored); the probe
		// ran it again: the success was lost.
		rep := checkSaved(t, burst([]Attempt{
			att(ClassTimeout, 0, "", 0, 100).retried(),
			att(ClassReplay, 201, "a", 150, 160).number(2),
			att(ClassOriginal, 201, "a", 300, 310).probe(),
		}))
		requireDecided(t, rep, RuleNoLostSuccess, VerdictFail, "late probe ran it again: 201 without Idempotent-Replayed: true")
	})
	t.Run("the probe got another answer", func(t *testing.T) {
		rep := checkSaved(t, burst([]Attempt{
			att(ClassOriginal, 201, "a", 0, 10),
			att(ClassReplay, 201, "b", 300, 310).probe(),
		}))
		requireDecided(t, rep, RuleNoLostSuccess, VerdictFail, `late probe: the replay differs from the final answer: 201 "b", want 201 "a"`)
	})
	t.Run("the probe got no final answer", func(t *testing.T) {
		rep := checkSaved(t, burst([]Attempt{
			att(ClassOriginal, 201, "a", 0, 10),
			att(ClassRetryLater, 503, "later", 300, 310).probe(),
		}))
		requireDecided(t, rep, RuleNoLostSuccess, VerdictInconclusive, "late probe got no final answer: 503 not replayed, not final")
	})
}

func TestRuleLivenessNamesTheAttemptsOfAKeyWithoutAFinalAnswer(t *testing.T) {
	rep := checkSaved(t, burst([]Attempt{
		att(ClassTimeout, 0, "", 0, 100).retried(),
		att(ClassInProgress, 409, "busy", 110, 111).number(2).retried(),
		att(ClassTransportError, 0, "", 200, 201).number(3).retried(),
		att(ClassRetryLater, 503, "later", 300, 301).number(4),
	}))
	requireDecided(t, rep, RuleLiveness, VerdictInconclusive,
		"no final answer: 4 attempts: timeout (retried), 409 in progress (retried), transport error (retried), 503 retry later")
	require.Zero(t, rep.Probe.Sent)
}

// The rules' cases of the old per-key classifier, as histories.
func TestJudgeKey(t *testing.T) {
	ok := att(ClassOriginal, 201, "a", 0, 10)
	other := att(ClassOriginal, 201, "b", 0, 10)
	replay := att(ClassReplay, 201, "a", 20, 21)
	otherReplay := att(ClassReplay, 201, "b", 20, 21)
	oversize := att(ClassReplay, 201, "problem", 20, 21).oversize()
	conflictReplay := att(ClassReplay, 409, "", 20, 21)
	inProgress := att(ClassInProgress, 409, "", 5, 6)
	tooMany := att(ClassRetryLater, 429, "", 5, 6)
	unavailable := att(ClassRetryLater, 503, "", 5, 6)
	server := att(ClassServerError, 500, "boom", 5, 6)
	lostLate := att(ClassTransportError, 0, "", 25, 26) // after the first replay's answer
	lostEarly := att(ClassTransportError, 0, "", 0, 1)
	p := func(a Attempt) Attempt { return a.probe() }

	for _, tc := range []struct {
		name     string
		attempts []Attempt
		class    string
		rule     string
		reason   string
	}{
		{"one original, replays", []Attempt{ok, replay, inProgress, tooMany, unavailable, lostLate, replay, p(replay)}, classPassed, "", ""},
		{"not probed", []Attempt{ok, replay}, classPassed, "", ""},
		{"probe retried to a replay", []Attempt{ok, p(unavailable).retried(), p(replay).number(2)}, classPassed, "", ""},
		{"oversize replays", []Attempt{ok, oversize, oversize, p(oversize)}, classPassed, "", ""},
		{"oversize replays alone", []Attempt{lostEarly, oversize, oversize, p(oversize)}, classPassed, "", ""},
		{"oversize of another status", []Attempt{att(ClassOriginal, 200, "a", 0, 1), oversize}, classFailed, RuleOneAnswer, "divergent: 2 distinct final responses"},
		{"nothing final", []Attempt{inProgress, tooMany, unavailable, lostEarly}, classInconclusive, RuleLiveness, "no final answer"},
		{"not sent", nil, classInconclusive, RuleLiveness, "not sent"},
		{"probe transport error", []Attempt{ok, p(lostLate)}, classInconclusive, RuleNoLostSuccess, "late probe got no final answer: transport error"},
		{"two executions", []Attempt{ok, other, ok}, classFailed, RuleAtMostOnce,
			`executed 3 times (201 x3 without Idempotent-Replayed: true); divergent: 2 distinct final responses: 201 "a" x2, 201 "b" x1`},
		{"success and 500", []Attempt{ok, server, replay}, classPassed, "", ""},
		{"two 500s", []Attempt{server, server}, classInconclusive, RuleLiveness, "no final answer: 2 attempts: 500 server error, 500 server error"},
		{"409 replay differs", []Attempt{ok, conflictReplay}, classFailed, RuleOneAnswer, "divergent: 2 distinct final responses"},
		{"probe executed", []Attempt{ok, inProgress, p(ok)}, classFailed, RuleAtMostOnce,
			"executed 2 times (201 x2 without Idempotent-Replayed: true), the late probe included"},
		{"probe replays another body", []Attempt{ok, replay, p(otherReplay)}, classFailed, RuleNoLostSuccess,
			`late probe: the replay differs from the final answer: 201 "b", want 201 "a"`},
		{"a retried 201 still ran", []Attempt{ok.retried(), replay.number(2)}, classFailed, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := &Operation{Key: "k", Attempts: tc.attempts}
			kv := judgeKey(op)
			if tc.name == "a retried 201 still ran" {
				// A custom policy that retries a 201: not a final answer,
				// still an execution.
				require.Equal(t, classPassed, kv.class, kv.failure.Reason)
				require.Equal(t, 1, kv.failure.Originals)
				return
			}
			require.Equal(t, tc.class, kv.class, kv.failure.Reason)
			require.Equal(t, tc.rule, kv.rule)
			require.Equal(t, tc.rule, kv.failure.Rule)
			if tc.reason == "" {
				require.Empty(t, kv.failure.Reason)
			} else {
				require.Contains(t, kv.failure.Reason, tc.reason)
			}
		})
	}

	// Unproven (the early lost attempt), so that its statuses are listed.
	kv := judgeKey(&Operation{Key: "k", Attempts: []Attempt{ok, replay, inProgress, tooMany, server, lostEarly, oversize, p(replay)}})
	f := kv.failure
	require.Equal(t, 1, f.Originals, "a 5xx is not an execution")
	require.Equal(t, 2, f.Replays)
	require.Equal(t, 1, f.InProgress)
	require.Equal(t, 1, f.RetryLater)
	require.Equal(t, 1, f.TransportErrors)
	require.Equal(t, 1, kv.oversize)
	require.Equal(t, 1, kv.server)
	require.Equal(t, map[int]int{201: 3, 409: 1, 429: 1, 500: 1}, f.Statuses)
	require.Equal(t, "201 replayed, identical", f.Probe)
}

func TestSnippetsAreWholeRunes(t *testing.T) {
	// 'a' then 'é's (two bytes each): the 48th byte is the first half of
	// the 24th 'é'. Every answer's body differs after it, so the key's
	// answers diverge and the reason shows the snippet.
	var n atomic.Int64
	body := "a" + strings.Repeat("é", 30)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "%s%d", body, n.Add(1))
	}))
	t.Cleanup(srv.Close)
	var hist bytes.Buffer
	rep, err := Run(t.Context(), Config{URL: srv.URL, Keys: 1, Dups: 2, NoProbe: true, History: &hist})
	require.NoError(t, err)
	require.Equal(t, VerdictFail, rep.Verdict())
	want := `"a` + strings.Repeat("é", 23) + `"...(`
	require.Contains(t, rep.Failures[0].Reason, want, "cut before the half rune")
	require.NotContains(t, rep.Failures[0].Reason, `\x`)
	require.NotContains(t, hist.String(), `\ufffd`)
	require.Contains(t, hist.String(), `"snippet":"a`+strings.Repeat("é", 23)+`"`)

	require.Equal(t, []byte("ab"), wholeRunes([]byte("ab")))
	require.Equal(t, []byte("a"), wholeRunes([]byte("a\xe2\x82")), "a three-byte rune cut after two")
	require.Equal(t, []byte("a€"), wholeRunes([]byte("a€")))
	require.Equal(t, []byte("a\xff"), wholeRunes([]byte("a\xff")), "not UTF-8 at all: left alone")
	require.Equal(t, `"a"...(5 bytes)`, describeBody(&Attempt{Size: 5, Snippet: "a\xc3"}), "a snippet read from a file")
}
