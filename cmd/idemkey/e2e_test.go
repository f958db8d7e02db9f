package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/examples/payments"
	"github.com/idemkey/idemkey/internal/redistest"
)

const payment = `{"amount": 1200, "currency": "EUR", "customer": "cus_1"}`

func TestDemo(t *testing.T) {
	r := runBin(t, 120*time.Second, "demo")
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	count := func(label string) int {
		m := regexp.MustCompile(`(?m)^\s*` + label + `\s+(\d+)$`).FindStringSubmatch(r.stdout)
		require.NotNil(t, m, "no %q in\n%s", label, r.stdout)
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		return n
	}
	keys := count("payments asked for")
	require.Equal(t, 300, keys)
	require.Equal(t, keys, count("payments created"))
	require.Equal(t, keys, count("provider charges"))
	require.Contains(t, r.stdout, "verdict: PASS")
	require.Contains(t, r.stdout, "300 passed, 0 failed, 0 inconclusive")
	require.Regexp(t, `count +provider_charges: 300 operations, 300 provider_charges \(1\.00 each; want 1\) = 300 for 300 keys that ran; 0 before, 300 after`, r.stdout)
	require.Contains(t, r.stdout, "late probe     300 keys probed: 300 identical replays")
	require.Contains(t, r.stdout, "exactly once: PASS")
	require.NotContains(t, r.stderr, "managed Redis", "a warning about the demo's own embedded miniredis")
	require.NotContains(t, r.stderr, "level=WARN")
}

func stats(t *testing.T, url string) payments.Stats {
	t.Helper()
	r, err := get(url + "/v1/stats")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, r.status, r.body)
	var s payments.Stats
	require.NoError(t, json.Unmarshal([]byte(r.body), &s))
	return s
}

// stormReport is the part of "idemkey storm --json" the tests read.
type stormReport struct {
	Verdict          string      `json:"verdict"`
	Requests         int         `json:"requests"`
	Originals        int         `json:"originals"`
	Replays          int         `json:"replays"`
	InProgress       int         `json:"in_progress"`
	Errors           int         `json:"errors"`
	KeysPassed       int         `json:"keys_passed"`
	KeysFailed       int         `json:"keys_failed"`
	KeysInconclusive int         `json:"keys_inconclusive"`
	Statuses         map[int]int `json:"status_counts"`
	Probe            struct {
		Identical int `json:"identical"`
	} `json:"probe"`
	Count struct {
		Before int64 `json:"before"`
		After  int64 `json:"after"`
		Delta  int64 `json:"delta"`
	} `json:"count"`
}

// stormTimeout is the --timeout of the storms run against serve in
// process: each request's retries get 40s, 4x storm's default 10s, which a
// loaded race build ran out of (.ci/stress with others' builds beside,
// load ~25: attempts of p99 8s, keys left without a final answer). On a
// quiet machine a storm ends in a second or two all the same.
const stormTimeout = "40s"

func TestStormPassesAgainstServe(t *testing.T) {
	for _, tc := range []struct {
		name      string
		serve     []string
		storm     []string
		conflicts bool
	}{
		// Duplicates wait for the first attempt and get its replay (the
		// storm retries a 409 should a wait run out on a loaded machine).
		{"wait", nil, []string{"--retry"}, false},
		// Duplicates get 409 at once; the storm retries them.
		{"409", []string{"--wait", "0s"}, []string{"--retry"}, true},
		// The same, with the flag's old name.
		{"409 retry-409", []string{"--wait", "0s"}, []string{"--retry-409"}, true},
		// The store on the plain client instead of the auto-pipeliner.
		{"no pipeline", []string{"--no-pipeline"}, []string{"--retry"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServe(t, append([]string{"--provider-latency", "10ms"}, tc.serve...)...)
			// Every request in flight at once: a 409 costs its Retry-After
			// of a second, once.
			const keys, dups = 24, 8
			r := runBin(t, 120*time.Second, append([]string{"storm", "--url", s.url + "/v1/payments",
				"-H", "Authorization: Bearer sk_test_storm", "--body", payment,
				"--keys", strconv.Itoa(keys), "--dups", strconv.Itoa(dups), "--concurrency", strconv.Itoa(keys * dups),
				"--count-url", s.url + "/v1/stats", "--count-field", "provider_charges", "--json", "--timeout", stormTimeout}, tc.storm...)...)
			require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			var rep stormReport
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
			require.Equal(t, "pass", rep.Verdict)
			require.Equal(t, keys, rep.Originals)
			require.Equal(t, keys*(dups-1), rep.Replays)
			require.Zero(t, rep.Errors)
			require.Equal(t, keys, rep.KeysPassed)
			require.Equal(t, keys, rep.Probe.Identical)
			require.Equal(t, int64(0), rep.Count.Before)
			require.Equal(t, int64(keys), rep.Count.Delta)
			if tc.conflicts {
				require.Positive(t, rep.InProgress, "duplicates got 409 while the first attempt ran")
			}
			require.Equal(t, payments.Stats{PaymentsCreated: keys, ProviderCharges: keys}, stats(t, s.url))
		})
	}
}

func TestStormFailsAgainstANonIdempotentServer(t *testing.T) {
	var charges atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Charges on every request, whatever its Idempotency-Key.
		n := charges.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"pay_%d","status":"succeeded"}`, n)
	}))
	t.Cleanup(srv.Close)
	r := runBin(t, 60*time.Second, "storm", "--url", srv.URL+"/v1/payments", "--body", payment, "--keys", "20", "--dups", "4")
	require.Equal(t, 1, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "verdict: FAIL (20 of 20 keys failed)")
	require.Contains(t, r.stdout, "executed 4 times")
	require.Equal(t, int64(80), charges.Load())
}

// inspected is the part of "idemkey inspect --json" the tests read.
type inspected struct {
	Found         bool   `json:"found"`
	Scope         string `json:"scope"`
	Key           string `json:"key"`
	Label         string `json:"label"`
	State         string `json:"state"`
	Attempt       int    `json:"attempt"`
	Fingerprint   string `json:"fingerprint"`
	RecoveryPoint string `json:"recovery_point"`
	RecoveryData  *struct {
		Text string `json:"text"`
	} `json:"recovery_data"`
	TTLMS      int64 `json:"ttl_ms"`
	LeaseTTLMS int64 `json:"lease_ttl_ms"`
	Response   *struct {
		Status   int                 `json:"status"`
		HTTP     bool                `json:"http"`
		Headers  map[string][]string `json:"headers"`
		BodySize int                 `json:"body_size"`
		Body     struct {
			Text string `json:"text"`
		} `json:"body"`
	} `json:"response"`
}

func inspectJSON(t *testing.T, args ...string) (inspected, result) {
	t.Helper()
	r := runBin(t, 30*time.Second, append([]string{"inspect", "--json"}, args...)...)
	var rec inspected
	if r.code == 0 || r.code == 1 {
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &rec), "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	return rec, r
}

func TestInspectShowsACompletedRecord(t *testing.T) {
	s := startServe(t, "--provider-latency", "0s")
	require.NotEmpty(t, s.redis, "serve names its embedded Redis")
	created, err := post(s.url, "sk_test_alice", "order-42", payment)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, created.status, created.body)

	// Flags after the key work too.
	r := runBin(t, 30*time.Second, "inspect", "--redis", s.redis, "--bearer", "sk_test_alice", "order-42")
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	for _, want := range []string{
		`key          "order-42"`,
		`scope        "` + payments.Scope("sk_test_alice") + `"`,
		"state        completed",
		"response     201 Created",
		"Location: " + strconv.Quote(created.header.Get("Location")),
		fmt.Sprintf("body size    %d bytes", len(created.body)),
		"body         " + strconv.Quote(created.body),
		"kept         fingerprint, attempt and outcome only",
	} {
		require.Contains(t, r.stdout, want)
	}
	require.Regexp(t, `fingerprint  [0-9a-f]{32}\n`, r.stdout)

	rec, r := inspectJSON(t, "--redis", s.redis, "--scope", payments.Scope("sk_test_alice"), "order-42")
	require.Equal(t, 0, r.code, r.stderr)
	require.True(t, rec.Found)
	require.Equal(t, "completed", rec.State)
	require.Equal(t, 1, rec.Attempt)
	require.Regexp(t, `^[0-9a-f]{32}$`, rec.Fingerprint)
	require.Greater(t, rec.TTLMS, int64(23*time.Hour/time.Millisecond))
	require.Zero(t, rec.LeaseTTLMS)
	require.NotNil(t, rec.Response)
	require.True(t, rec.Response.HTTP)
	require.Equal(t, http.StatusCreated, rec.Response.Status)
	require.Equal(t, []string{created.header.Get("Location")}, rec.Response.Headers["Location"])
	require.Equal(t, len(created.body), rec.Response.BodySize)
	require.Equal(t, created.body, rec.Response.Body.Text)

	// The quoted form of a key is the same key, as in the header.
	_, r = inspectJSON(t, "--redis", s.redis, "--bearer", "sk_test_alice", `"order-42"`)
	require.Equal(t, 0, r.code, r.stderr)

	// Absent: another caller's scope, another key, another prefix.
	for _, args := range [][]string{
		{"--bearer", "sk_test_bob", "order-42"},
		{"--bearer", "sk_test_alice", "order-43"},
		{"--bearer", "sk_test_alice", "--prefix", "other:", "order-42"},
	} {
		rec, r := inspectJSON(t, append([]string{"--redis", s.redis}, args...)...)
		require.Equal(t, 1, r.code, "%v: %s", args, r.stderr)
		require.False(t, rec.Found)
		require.Contains(t, r.stderr, "no record for key")
	}

	r = runBin(t, 30*time.Second, "inspect", "--redis", "redis://127.0.0.1:1/0", "--scope", "s", "k")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "redis at 127.0.0.1:1")
}

// The crash drill: serve dies right after charging; a restarted serve
// completes the retry by resuming from the checkpoint, without charging
// again, and later retries replay. The redis-server outlives both.
func TestCrashDrill(t *testing.T) {
	rs := redistest.Start(t)
	redisURL := "redis://" + rs.Addr() + "/0"
	rdb := rs.Client(t)
	api, err := payments.New(payments.Config{Redis: rdb}) // to read the counters
	require.NoError(t, err)
	counters := func() payments.Stats {
		t.Helper()
		s, err := api.Stats(context.Background())
		require.NoError(t, err)
		return s
	}
	flags := []string{"--redis", redisURL, "--faults", "--lease", "1s", "--provider-latency", "0s"}

	first := startServe(t, flags...)
	_, err = post(first.url, "sk_test_alice", "order-crash", payment, payments.FaultHeader, payments.FaultCrashAfterCharge)
	require.Error(t, err, "the crashed process answers nothing")
	require.Equal(t, crashExitCode, first.wait(t, 15*time.Second), first.stderr.String())
	require.Contains(t, first.stderr.String(), "crash-after-charge")
	require.Equal(t, payments.Stats{ProviderCharges: 1}, counters(), "charged, not recorded")

	rec, r := inspectJSON(t, "--redis", redisURL, "--bearer", "sk_test_alice", "order-crash")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "started", rec.State)
	require.Equal(t, payments.RecoveryCharged, rec.RecoveryPoint)
	require.NotNil(t, rec.RecoveryData)
	var charged payments.Charged
	require.NoError(t, json.Unmarshal([]byte(rec.RecoveryData.Text), &charged))
	require.Nil(t, rec.Response)

	second := startServe(t, flags...)
	// The retry waits (serve's --wait) or is told 409 until the dead
	// attempt's lease runs out, then takes the key over.
	var resumed *httpResult
	deadline := time.Now().Add(20 * time.Second)
	for resumed == nil || resumed.status == http.StatusConflict {
		require.True(t, time.Now().Before(deadline), "the retry was not taken over in time: %+v", resumed)
		resumed, err = post(second.url, "sk_test_alice", "order-crash", payment)
		require.NoError(t, err)
	}
	require.Equal(t, http.StatusCreated, resumed.status, resumed.body)
	require.Empty(t, resumed.header.Get("Idempotent-Replayed"))
	var p payments.Payment
	require.NoError(t, json.Unmarshal([]byte(resumed.body), &p))
	require.Equal(t, charged.Charge.ID, p.Charge, "the payment uses the charge made before the crash")
	require.Equal(t, charged.PaymentID, p.ID)
	require.Equal(t, payments.Stats{PaymentsCreated: 1, ProviderCharges: 1}, counters())
	second.stderr.waitFor(t, "resuming after the charge") // logged before the answer, copied from the pipe after it

	for range 2 {
		again, err := post(second.url, "sk_test_alice", "order-crash", payment)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, again.status)
		require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
		require.Equal(t, resumed.body, again.body)
	}
	require.Equal(t, payments.Stats{PaymentsCreated: 1, ProviderCharges: 1}, counters())

	rec, r = inspectJSON(t, "--redis", redisURL, "--bearer", "sk_test_alice", "order-crash")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "completed", rec.State)
	require.Equal(t, 2, rec.Attempt)
	require.Equal(t, resumed.body, rec.Response.Body.Text)

	got, err := send(mustRequest(t, http.MethodGet, second.url+resumed.header.Get("Location"), "sk_test_alice"))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, got.status)
	require.Equal(t, resumed.body, got.body)
}

// The provider-unavailable drill: 503, the key is released, a retry charges.
func TestProviderUnavailableDrill(t *testing.T) {
	s := startServe(t, "--faults", "--provider-latency", "0s")
	down, err := post(s.url, "sk_test_alice", "order-outage", payment, payments.FaultHeader, payments.FaultProviderUnavailable)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, down.status, down.body)
	require.Equal(t, payments.Stats{}, stats(t, s.url))
	_, r := inspectJSON(t, "--redis", s.redis, "--bearer", "sk_test_alice", "order-outage")
	require.Equal(t, 1, r.code, "the key was released")

	ok, err := post(s.url, "sk_test_alice", "order-outage", payment)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, ok.status, ok.body)
	require.Empty(t, ok.header.Get("Idempotent-Replayed"))
	require.Equal(t, payments.Stats{PaymentsCreated: 1, ProviderCharges: 1}, stats(t, s.url))
}

func mustRequest(t *testing.T, method, url, token string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}
