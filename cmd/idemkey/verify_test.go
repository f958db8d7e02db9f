package main

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/examples/payments"
	"github.com/idemkey/idemkey/internal/refserver"
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
		runs    int64 // payments the run makes: the concurrency check's, the fingerprint probes', the lost response's
		results map[string]string
	}{
		{
			name:  "count",
			serve: []string{"--provider-latency", "10ms"},
			runs:  2,
		},
		{
			name:   "drop-response",
			serve:  []string{"--provider-latency", "10ms", "--faults"},
			verify: []string{"--fault-header", "X-Demo-Fault: drop-response"},
			runs:   3,
		},
		{
			// Duplicates get 409 at once; verify retries them after
			// Retry-After (a second) until the replay.
			name:   "409",
			serve:  []string{"--provider-latency", "200ms", "--wait", "0s", "--faults"},
			verify: []string{"--fault-header", "X-Demo-Fault: drop-response"},
			runs:   3,
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
			if tc.runs == 3 {
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

func startRef(t *testing.T, s *refserver.Server) string {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv.URL
}

func verifyRef(t *testing.T, s *refserver.Server, args ...string) (verified, result, *refserver.Server) {
	t.Helper()
	url := startRef(t, s)
	v, r := runVerifyBin(t, append([]string{"--url", url + "/pay", "--body", payment, "--count-url", url + "/stats", "--count-field", "runs"}, args...)...)
	return v, r, s
}

func TestVerifyPassesAgainstAReferenceServer(t *testing.T) {
	v, r, s := verifyRef(t, &refserver.Server{})
	require.Equal(t, 0, r.code, r.stdout)
	require.Equal(t, "pass", v.Verdict)
	require.Equal(t, int64(2), s.Runs(), "the concurrency check's run and the fingerprint probes'")
	// This server hashes the body's bytes: the probe says so.
	require.True(t, strings.HasPrefix(v.Observed.Fingerprint.Canonical, "no, the body's bytes are hashed"), v.Observed.Fingerprint.Canonical)
}

func TestVerifyFailsWithoutIdempotency(t *testing.T) {
	v, r, s := verifyRef(t, &refserver.Server{NoIdempotency: true})
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
	require.Positive(t, s.Runs())
}

func TestVerifyFailsWhenTheBodyIsIgnored(t *testing.T) {
	v, r, s := verifyRef(t, &refserver.Server{IgnoreBody: true})
	require.Equal(t, 1, r.code, r.stdout)
	require.Equal(t, map[string]string{"missing-key": "ok", "malformed-key": "ok", "concurrency": "ok", "replay": "ok",
		"mismatch": "fail", "side-effects": "ok", "lost-response": "skip"}, v.results(), r.stdout)
	require.Contains(t, v.failed("mismatch"), "422 for the same key with another body ($.amount: 1200 -> 1201): 201 replayed")
	require.True(t, strings.HasPrefix(v.Observed.Fingerprint.Body, "not covered"), v.Observed.Fingerprint.Body)
	require.Equal(t, int64(2), s.Runs(), "the concurrency check's run and the fingerprint probes'")
}

func TestVerifyFailsWhenAMissingKeyRuns(t *testing.T) {
	url := startRef(t, &refserver.Server{KeyOptional: true})
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
	v, r, _ := verifyRef(t, &refserver.Server{DropLocation: true})
	require.Equal(t, 1, r.code, r.stdout)
	res := v.results()
	require.Equal(t, "fail", res["replay"], r.stdout)
	require.Equal(t, "ok", res["concurrency"], r.stdout)
	require.Equal(t, "ok", res["missing-key"], r.stdout)
	require.Contains(t, v.failed("replay"), `Location none, not /pay/1`)
}

// A server that only locks a key while it runs: its duplicates get 409,
// and their retries run again.
func TestVerifyFailsWhenItOnlyLocks(t *testing.T) {
	v, r, s := verifyRef(t, &refserver.Server{LockOnly: true, Conflict: "0.2", Hold: 4}, "--parallel", "5")
	require.Equal(t, 1, r.code, r.stdout)
	res := v.results()
	require.Equal(t, "fail", res["concurrency"], r.stdout)
	require.Equal(t, "fail", res["replay"], r.stdout)
	require.Equal(t, "fail", res["side-effects"], r.stdout)
	require.GreaterOrEqual(t, v.Observed.Concurrency.InProgress, 4)
	require.Equal(t, 5, v.Observed.Concurrency.Originals, "each 409 ran again on its retry")
	require.Contains(t, v.failed("concurrency"), "exactly one original: 5 (201 x5)")
	require.Contains(t, v.failed("replay"), "marked Idempotent-Replayed: true: 201 (")
	require.Greater(t, s.Runs(), int64(5))
}

// A server that replays without saying so.
func TestVerifyFailsWhenReplaysAreUnmarked(t *testing.T) {
	v, r, s := verifyRef(t, &refserver.Server{NoReplayHeader: true})
	require.Equal(t, 1, r.code, r.stdout)
	res := v.results()
	require.Equal(t, "fail", res["replay"], r.stdout)
	require.Equal(t, "fail", res["concurrency"], r.stdout)
	require.Equal(t, "ok", res["side-effects"], r.stdout)
	require.Contains(t, v.failed("replay"), "marked Idempotent-Replayed: true: 201 (application/json")
	require.Equal(t, int64(2), s.Runs(), "the concurrency check's run and the fingerprint probes'")
}

func TestVerifyRetries409s(t *testing.T) {
	v, r, s := verifyRef(t, &refserver.Server{Conflict: "0.2", Hold: 9}, "--parallel", "10")
	require.Equal(t, 0, r.code, r.stdout)
	// The first run waits for 9 409s; each copy ends with one replay.
	c := v.Observed.Concurrency
	require.GreaterOrEqual(t, c.InProgress, 9)
	require.Equal(t, map[string]int{"0.2": c.InProgress}, c.RetryAfter)
	require.Equal(t, 1, c.Originals)
	require.Equal(t, 9, c.Replays)
	require.Equal(t, int64(2), s.Runs(), "the concurrency check's run and the fingerprint probes'")

	// Without Retry-After, verify still retries (with backoff), and says so.
	v, r, _ = verifyRef(t, &refserver.Server{Conflict: "-", Hold: 4}, "--parallel", "5")
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

// --same-caller-header sends the concurrency check's key again as the same
// caller with another credential: a server that scopes keys by caller
// replays it; one that scopes them by the credential (as idemkey's default
// scope does) runs it again, and the check fails naming Options.Scope.
func TestVerifySameCallerHeader(t *testing.T) {
	tokens := map[string]string{"Bearer alice": "alice", "Bearer alice-refreshed": "alice"}
	args := []string{"-H", "Authorization: Bearer alice", "--same-caller-header", "Authorization: Bearer alice-refreshed"}

	v, r, s := verifyRef(t, &refserver.Server{Callers: tokens}, args...)
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Equal(t, "ok", v.results()["same-caller"], r.stdout)
	require.Equal(t, int64(2), s.Runs(), "the refreshed token ran nothing")

	v, r, s = verifyRef(t, &refserver.Server{}, args...)
	require.Equal(t, 1, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Equal(t, "fail", v.results()["same-caller"], r.stdout)
	require.Contains(t, v.failed("same-caller"), "the same caller with another credential gets the first answer replayed: marked Idempotent-Replayed: true: 201")
	require.Contains(t, v.failed("same-caller"), "nothing ran again: runs +1")
	var evidence []string
	for _, c := range v.Checks {
		if c.Name == "same-caller" {
			evidence = c.Evidence
		}
	}
	require.Len(t, evidence, 1)
	require.Contains(t, evidence[0], "set Options.Scope to the authenticated caller")
	require.Equal(t, int64(3), s.Runs())

	// Without the flag the check is not in the report: verify's output is
	// what it was.
	v, r, _ = verifyRef(t, &refserver.Server{})
	require.Equal(t, 0, r.code, r.stdout)
	require.NotContains(t, v.results(), "same-caller")

	for _, bad := range [][]string{
		{"-H", "Authorization: Bearer alice", "--same-caller-header", "Authorization: Bearer alice"},
		{"--same-caller-header", "Idempotency-Key: k"},
		{"--side-effects-per-run", "-1", "--count-url", "http://127.0.0.1:1/stats", "--count-field", "n"},
		{"--side-effects-per-run", "0"},
	} {
		r := runBin(t, 30*time.Second, append([]string{"verify", "--url", "http://127.0.0.1:1/pay"}, bad...)...)
		require.Equal(t, 2, r.code, "%v: %s", bad, r.stderr)
	}
}

// --side-effects-per-run 0: an outcome with no side effect passes the
// count's checks when the counter does not move.
func TestVerifySideEffectsPerRun(t *testing.T) {
	url := startRef(t, &refserver.Server{})
	v, r := runVerifyBin(t, "--url", url+"/pay", "--body", payment, "--count-url", url+"/stats", "--count-field", "runs",
		"--side-effects-per-run", "0")
	require.Equal(t, 1, r.code, "the reference server moves its counter once per run:\n%s", r.stdout)
	require.Contains(t, v.failed("side-effects"), "the counter rose by exactly 0: runs 0 -> 1 (+1)")
}
