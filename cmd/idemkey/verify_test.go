package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/examples/payments"
)

// verified is "idemkey verify --json", as the tests read it.
type verified struct {
	Verdict  string `json:"verdict"`
	Requests int    `json:"requests"`
	Checks   []struct {
		Name     string   `json:"name"`
		Result   string   `json:"result"`
		Summary  string   `json:"summary"`
		Evidence []string `json:"evidence"`
		Clauses  []struct {
			Clause string `json:"clause"`
			OK     bool   `json:"ok"`
			Detail string `json:"detail"`
		} `json:"clauses"`
	} `json:"checks"`
	Observed struct {
		Concurrency struct {
			Copies     int            `json:"copies"`
			Originals  int            `json:"originals"`
			Replays    int            `json:"replays"`
			InProgress int            `json:"in_progress"`
			RetryAfter map[string]int `json:"retry_after"`
		} `json:"concurrency"`
		Fingerprint struct {
			Body      string `json:"body"`
			Query     string `json:"query"`
			Canonical string `json:"canonical_json"`
		} `json:"fingerprint"`
	} `json:"observed"`
	Count *struct {
		Before int64 `json:"before"`
		After  int64 `json:"after"`
	} `json:"count"`
}

// results maps each check's name to its result.
func (v verified) results() map[string]string {
	m := map[string]string{}
	for _, c := range v.Checks {
		m[c.Name] = c.Result
	}
	return m
}

// failed returns the clauses of check name that do not hold, with their
// details.
func (v verified) failed(name string) string {
	var out []string
	for _, c := range v.Checks {
		if c.Name == name {
			for _, cl := range c.Clauses {
				if !cl.OK {
					out = append(out, cl.Clause+": "+cl.Detail)
				}
			}
		}
	}
	return strings.Join(out, "\n")
}

// runVerifyBin runs "idemkey verify --json" and decodes its output.
func runVerifyBin(t *testing.T, args ...string) (verified, result) {
	t.Helper()
	r := runBin(t, 120*time.Second, append([]string{"verify", "--json"}, args...)...)
	var v verified
	if r.code == 0 || r.code == 1 {
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	return v, r
}

func TestVerifyPassesAgainstServe(t *testing.T) {
	for _, tc := range []struct {
		name    string
		serve   []string
		verify  []string
		runs    int64 // payments the run makes
		results map[string]string
	}{
		{
			name:  "count",
			serve: []string{"--provider-latency", "10ms"},
			runs:  1,
		},
		{
			name:   "drop-response",
			serve:  []string{"--provider-latency", "10ms", "--faults"},
			verify: []string{"--fault-header", "X-Demo-Fault: drop-response"},
			runs:   2,
		},
		{
			// Duplicates get 409 at once; verify retries them after
			// Retry-After (a second) until the replay.
			name:   "409",
			serve:  []string{"--provider-latency", "200ms", "--wait", "0s", "--faults"},
			verify: []string{"--fault-header", "X-Demo-Fault: drop-response"},
			runs:   2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServe(t, tc.serve...)
			report := filepath.Join(t.TempDir(), "idempotency.md")
			v, r := runVerifyBin(t, append([]string{"--url", s.url + "/v1/payments", "-H", "Authorization: Bearer sk_test_x", "--body", payment,
				"--count-url", s.url + "/v1/stats", "--count-field", "provider_charges", "--report", report}, tc.verify...)...)
			require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			require.Equal(t, "pass", v.Verdict)
			want := map[string]string{"missing-key": "ok", "malformed-key": "ok", "concurrency": "ok", "replay": "ok",
				"mismatch": "ok", "side-effects": "ok", "lost-response": "skip"}
			if tc.runs == 2 {
				want["lost-response"] = "ok"
			}
			require.Equal(t, want, v.results(), r.stdout)
			require.Equal(t, 20, v.Observed.Concurrency.Copies)
			require.Equal(t, 1, v.Observed.Concurrency.Originals)
			require.Equal(t, 19, v.Observed.Concurrency.Replays)
			for ra := range v.Observed.Concurrency.RetryAfter {
				require.Equal(t, "1", ra, "serve's 409s say Retry-After: 1")
			}
			require.Equal(t, int64(0), v.Count.Before)
			require.Equal(t, tc.runs, v.Count.After)
			require.Equal(t, payments.Stats{PaymentsCreated: tc.runs, ProviderCharges: tc.runs}, stats(t, s.url),
				"the run made exactly one payment per key")
			require.True(t, strings.HasPrefix(v.Observed.Fingerprint.Body, "covered"), v.Observed.Fingerprint.Body)
			require.True(t, strings.HasPrefix(v.Observed.Fingerprint.Query, "covered"), v.Observed.Fingerprint.Query)
			require.True(t, strings.HasPrefix(v.Observed.Fingerprint.Canonical, "yes"), v.Observed.Fingerprint.Canonical)

			md, err := os.ReadFile(report)
			require.NoError(t, err)
			for _, want := range []string{
				"## Idempotency for `POST " + s.url + "/v1/payments`\n",
				"- Mechanism: Idempotency-Key with stored responses",
				"- Key scope and retention: not observable from outside.",
				"- Fingerprint: body and query, as far as the checks showed; JSON bodies compared canonically",
				"- Responses: 201 replay (marked `Idempotent-Replayed: true`) / ",
				" / 422 mismatch / 400 missing\n",
				"- Downstream keys: not observable from outside.",
				"- Tests: concurrency ok, replay ok, mismatch ok, crash-resume not observable from outside",
				"- Verdict: **pass**",
			} {
				require.Contains(t, string(md), want)
			}
		})
	}
}

// The text output: a line per check, and the verdict.
func TestVerifyTextAgainstServe(t *testing.T) {
	s := startServe(t, "--provider-latency", "0s")
	r := runBin(t, 60*time.Second, "verify", "--url", s.url+"/v1/payments", "-H", "Authorization: Bearer sk_test_x", "--body", payment)
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	for _, want := range []string{
		"idemkey verify: POST " + s.url + "/v1/payments (key header Idempotency-Key)",
		"ok    missing key    400 without Idempotency-Key (application/problem+json)",
		"ok    malformed key  300-character key: 400; key with a control character (tab): 400",
		"ok    concurrency    20 copies at once: 1 original (201), 19 replays, 0 409s",
		"ok    mismatch       422 for a changed body ($.amount: 1200 -> 1201)",
		"skip  side effects   no --count-url",
		"skip  lost response  no --fault-header",
		"verdict: PASS (5 ok, 2 skipped;",
	} {
		require.Contains(t, r.stdout, want)
	}
	requireTerminalSafe(t, r.stdout)
}

// refServer is an in-memory Idempotency-Key server for POST /pay, right
// unless one of its defects is switched on. GET /stats counts its runs.
type refServer struct {
	noIdempotency bool   // every request runs, key or no key
	ignoreBody    bool   // the fingerprint leaves the body out: a changed body replays
	keyOptional   bool   // a request without a key runs, answered 200
	dropLocation  bool   // replays lose Location
	conflict      string // "": duplicates wait for the first run; else they get 409 with this Retry-After ("-" for none)

	// hold makes the first run wait until this many duplicates have been
	// answered 409, so that they surely overlap (bounded by 10 s).
	hold int

	runs      atomic.Int64
	mu        sync.Mutex
	records   map[string]*refRecord
	conflicts int
	held      chan struct{} // closed once hold 409s went out
}

type refRecord struct {
	fp       string
	done     chan struct{}
	status   int
	body     []byte
	location string
}

func startRef(t *testing.T, s *refServer) string {
	t.Helper()
	s.records = map[string]*refRecord{}
	s.held = make(chan struct{})
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv.URL
}

func (s *refServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/stats" {
		fmt.Fprintf(w, `{"runs": %d}`, s.runs.Load())
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	key := r.Header.Get("Idempotency-Key")
	switch {
	case s.noIdempotency:
		s.run(w, http.StatusCreated)
		return
	case key == "" && s.keyOptional:
		s.run(w, http.StatusOK)
		return
	case key == "":
		http.Error(w, "Idempotency-Key is required", http.StatusBadRequest)
		return
	case len(key) > 255 || strings.ContainsFunc(key, func(r rune) bool { return r < '!' || r > '~' }):
		http.Error(w, "malformed Idempotency-Key", http.StatusBadRequest)
		return
	}
	fp := r.Method + " " + r.URL.RequestURI()
	if !s.ignoreBody {
		fp += "\n" + string(body)
	}
	s.mu.Lock()
	rec := s.records[key]
	if rec == nil {
		rec = &refRecord{fp: fp, done: make(chan struct{})}
		s.records[key] = rec
		first := len(s.records) == 1
		s.mu.Unlock()
		if first && s.hold > 0 {
			select {
			case <-s.held:
			case <-time.After(10 * time.Second):
			}
		}
		n := s.runs.Add(1)
		rec.status, rec.location = http.StatusCreated, fmt.Sprintf("/pay/%d", n)
		rec.body = fmt.Appendf(nil, `{"id":"pay_%d"}`, n)
		close(rec.done)
		w.Header().Set("Location", rec.location)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body)
		return
	}
	if rec.fp != fp {
		s.mu.Unlock()
		http.Error(w, "the key was used for another request", http.StatusUnprocessableEntity)
		return
	}
	if s.conflict != "" {
		select {
		case <-rec.done:
		default:
			s.conflicts++
			if s.conflicts == s.hold {
				close(s.held)
			}
			s.mu.Unlock()
			if s.conflict != "-" {
				w.Header().Set("Retry-After", s.conflict)
			}
			http.Error(w, "in progress", http.StatusConflict)
			return
		}
	}
	s.mu.Unlock()
	select {
	case <-rec.done:
	case <-r.Context().Done():
		return
	}
	if !s.dropLocation {
		w.Header().Set("Location", rec.location)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Idempotent-Replayed", "true")
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body)
}

func (s *refServer) run(w http.ResponseWriter, status int) {
	n := s.runs.Add(1)
	w.Header().Set("Location", fmt.Sprintf("/pay/%d", n))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"id":"pay_%d"}`, n)
}

func verifyRef(t *testing.T, s *refServer, args ...string) (verified, result, *refServer) {
	t.Helper()
	url := startRef(t, s)
	v, r := runVerifyBin(t, append([]string{"--url", url + "/pay", "--body", payment, "--count-url", url + "/stats", "--count-field", "runs"}, args...)...)
	return v, r, s
}

func TestVerifyPassesAgainstAReferenceServer(t *testing.T) {
	v, r, s := verifyRef(t, &refServer{})
	require.Equal(t, 0, r.code, r.stdout)
	require.Equal(t, "pass", v.Verdict)
	require.Equal(t, int64(1), s.runs.Load())
	// This server hashes the body's bytes: the probe says so.
	require.True(t, strings.HasPrefix(v.Observed.Fingerprint.Canonical, "no, the body's bytes are hashed"), v.Observed.Fingerprint.Canonical)
}

func TestVerifyFailsWithoutIdempotency(t *testing.T) {
	v, r, s := verifyRef(t, &refServer{noIdempotency: true})
	require.Equal(t, 1, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Equal(t, "fail", v.Verdict)
	res := v.results()
	require.Equal(t, "fail", res["concurrency"], r.stdout)
	require.Equal(t, "fail", res["replay"], r.stdout)
	require.Equal(t, "fail", res["missing-key"], r.stdout)
	require.Equal(t, "fail", res["mismatch"], r.stdout)
	require.Equal(t, "fail", res["side-effects"], r.stdout)
	require.Equal(t, 20, v.Observed.Concurrency.Originals)
	require.Contains(t, v.failed("concurrency"), "exactly one original: 20 (201 x20)")
	require.Contains(t, v.failed("concurrency"), "the rest are replays or 409s with Retry-After: 0 replays, 0 409s; not so: 19 more originals")
	require.Contains(t, v.failed("replay"), "marked Idempotent-Replayed: true")
	require.Positive(t, s.runs.Load())
}

func TestVerifyFailsWhenTheBodyIsIgnored(t *testing.T) {
	v, r, s := verifyRef(t, &refServer{ignoreBody: true})
	require.Equal(t, 1, r.code, r.stdout)
	require.Equal(t, map[string]string{"missing-key": "ok", "malformed-key": "ok", "concurrency": "ok", "replay": "ok",
		"mismatch": "fail", "side-effects": "ok", "lost-response": "skip"}, v.results(), r.stdout)
	require.Contains(t, v.failed("mismatch"), "422 for the same key with another body ($.amount: 1200 -> 1201): 201 replayed")
	require.True(t, strings.HasPrefix(v.Observed.Fingerprint.Body, "not covered"), v.Observed.Fingerprint.Body)
	require.Equal(t, int64(1), s.runs.Load())
}

func TestVerifyFailsWhenAMissingKeyRuns(t *testing.T) {
	url := startRef(t, &refServer{keyOptional: true})
	v, r := runVerifyBin(t, "--url", url+"/pay", "--body", payment)
	require.Equal(t, 1, r.code, r.stdout)
	require.Equal(t, map[string]string{"missing-key": "fail", "malformed-key": "ok", "concurrency": "ok", "replay": "ok",
		"mismatch": "ok", "side-effects": "skip", "lost-response": "skip"}, v.results(), r.stdout)
	require.Contains(t, v.failed("missing-key"), "400 without Idempotency-Key: 200 (application/json")

	// --optional-key: the endpoint allows it, and nothing is sent.
	v, r = runVerifyBin(t, "--url", url+"/pay", "--body", payment, "--optional-key")
	require.Equal(t, 0, r.code, r.stdout)
	require.Equal(t, "skip", v.results()["missing-key"])
}

func TestVerifyFailsWhenReplaysLoseLocation(t *testing.T) {
	v, r, _ := verifyRef(t, &refServer{dropLocation: true})
	require.Equal(t, 1, r.code, r.stdout)
	res := v.results()
	require.Equal(t, "fail", res["replay"], r.stdout)
	require.Equal(t, "ok", res["concurrency"], r.stdout)
	require.Equal(t, "ok", res["missing-key"], r.stdout)
	require.Contains(t, v.failed("replay"), `Location none, not /pay/1`)
}

func TestVerifyRetries409s(t *testing.T) {
	v, r, s := verifyRef(t, &refServer{conflict: "0.2", hold: 9}, "--parallel", "10")
	require.Equal(t, 0, r.code, r.stdout)
	// The first run waits for 9 409s; each copy ends with one replay.
	c := v.Observed.Concurrency
	require.GreaterOrEqual(t, c.InProgress, 9)
	require.Equal(t, map[string]int{"0.2": c.InProgress}, c.RetryAfter)
	require.Equal(t, 1, c.Originals)
	require.Equal(t, 9, c.Replays)
	require.Equal(t, int64(1), s.runs.Load())

	// Without Retry-After, verify still retries (with backoff), and says so.
	v, r, _ = verifyRef(t, &refServer{conflict: "-", hold: 4}, "--parallel", "5")
	require.Equal(t, 1, r.code, r.stdout)
	require.Equal(t, "fail", v.results()["concurrency"], r.stdout)
	require.Contains(t, v.failed("concurrency"), `409 with Retry-After ""`)
	require.Equal(t, 4, v.Observed.Concurrency.Replays, "retried until the replay")
}

func TestVerifyUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--url: a URL is required"},
		{[]string{"--url", "ftp://h/x"}, "scheme must be http or https"},
		{[]string{"--url", "http://127.0.0.1:1/x", "--parallel", "1"}, "--parallel must be 2 to 1000"},
		{[]string{"--url", "http://127.0.0.1:1/x", "--body", "{}", "--body-file", "f"}, "mutually exclusive"},
		{[]string{"--url", "http://127.0.0.1:1/x", "--count-url", "http://127.0.0.1:1/s"}, "go together"},
		{[]string{"--url", "http://127.0.0.1:1/x", "-H", "Idempotency-Key: k"}, "Idempotency-Key is set by each check"},
		{[]string{"--url", "http://127.0.0.1:1/x", "-H", "nocolon"}, `want "Name: value"`},
		{[]string{"--url", "http://127.0.0.1:1/x", "--fault-header", "X-Fault"}, "--fault-header"},
		{[]string{"--url", "http://127.0.0.1:1/x", "--report", "/nonexistent/dir/r.md"}, "--report"},
		{[]string{"--url", "http://127.0.0.1:1/x", "extra"}, `unexpected argument "extra"`},
		// Unreachable: nothing was checked.
		{[]string{"--url", "http://127.0.0.1:1/x"}, "unreachable: POST http://127.0.0.1:1/x"},
		{[]string{"--url", "http://127.0.0.1:1/x", "--count-url", "http://127.0.0.1:1/s", "--count-field", "n"}, "--count-url"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runBin(t, 30*time.Second, append([]string{"verify"}, tc.args...)...)
			require.Equal(t, 2, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			require.Contains(t, r.stderr, tc.want)
			require.Empty(t, r.stdout)
		})
	}
	r := runBin(t, 30*time.Second, "verify", "-h")
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stderr, "--fault-header")
}

func TestChangeOneValue(t *testing.T) {
	for _, tc := range []struct {
		in, out, change, err string
	}{
		{payment, `{"amount": 1201, "currency": "EUR", "customer": "cus_1"}`, "$.amount: 1200 -> 1201", ""},
		{`{"customer": "cus_1", "amount": 1200}`, `{"customer": "cus_1", "amount": 1201}`, "$.amount: 1200 -> 1201", ""},
		{`{"a": {"b c": [true, -2.5]}}`, `{"a": {"b c": [true, -1.5]}}`, `$.a["b c"][1]: -2.5 -> -1.5`, ""},
		{`{"items": [{"sku": "x\"y", "ok": false}]}`, `{"items": [{"sku": "x\"yx", "ok": false}]}`, `$.items[0].sku: "x\"y" -> "x\"yx"`, ""},
		{`[false, null]`, `[true, null]`, "$[0]: false -> true", ""},
		{`  7 `, `  8 `, "$: 7 -> 8", ""},
		{`{"n": 9223372036854775807}`, `{"n": 9223372036854775806}`, "$.n: 9223372036854775807 -> 9223372036854775806", ""},
		{`{"n": 1e400}`, `{"n": 0}`, "$.n: 1e400 -> 0", ""},
		{`{}`, "", "", "no number, string or boolean"},
		{`{"a": null}`, "", "", "no number, string or boolean"},
		{``, "", "", "no body"},
		{`amount=1200`, "", "", "not JSON"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			out, change, err := changeOneValue([]byte(tc.in))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.out, string(out))
			require.Equal(t, tc.change, change)
		})
	}
}

func TestReformat(t *testing.T) {
	out, err := reformat([]byte(payment))
	require.NoError(t, err)
	require.Equal(t, "{\n    \"amount\": 1200,\n    \"currency\": \"EUR\",\n    \"customer\": \"cus_1\"\n}\n", string(out))
	already := []byte("{\n    \"a\": 1\n}\n")
	out, err = reformat(already)
	require.NoError(t, err)
	require.NotEqual(t, already, out)
	require.JSONEq(t, string(already), string(out))
	_, err = reformat([]byte("a=1"))
	require.Error(t, err)
}

func TestDiffBytes(t *testing.T) {
	require.Empty(t, diffBytes([]byte("same"), []byte("same")))
	require.Equal(t, `body differs at byte 11: "{\"id\":\"pay_2\"}", not "{\"id\":\"pay_1\"}"`,
		diffBytes([]byte(`{"id":"pay_1"}`), []byte(`{"id":"pay_2"}`)))
	require.Contains(t, diffBytes([]byte("abc"), []byte("ab")), `differs at byte 2: (end), not "abc"`)
	require.Contains(t, diffBytes([]byte("a"), []byte("a\x1b[31m")), `"a\x1b[31m", not (end)`)
}
