package storm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/idemkey/idemkey/internal/syncbuf"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ---- fake servers -------------------------------------------------------

// idempotentServer is a correct idempotent endpoint: the first request for a
// key runs a 20ms side effect and stores its response, concurrent
// duplicates get 409 with a short Retry-After, later ones a replay.
type idempotentServer struct {
	mu         sync.Mutex
	entries    map[string]*entry
	executions int
}

type entry struct {
	done   bool
	status int
	body   []byte
}

func (s *idempotentServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "missing key", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	e, ok := s.entries[key]
	if !ok {
		e = &entry{}
		s.entries[key] = e
		s.executions++
		n := s.executions
		s.mu.Unlock()

		time.Sleep(20 * time.Millisecond) // the side effect
		body := fmt.Appendf(nil, `{"id":"pay_%d","status":"captured"}`, n)

		s.mu.Lock()
		e.done, e.status, e.body = true, http.StatusCreated, body
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
		return
	}
	done, status, body := e.done, e.status, e.body
	s.mu.Unlock()
	if !done {
		w.Header().Set("Retry-After", "0.01")
		http.Error(w, `{"error":"in progress"}`, http.StatusConflict)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Idempotent-Replayed", "true")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (s *idempotentServer) Executions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.executions
}

func newIdempotentServer(t *testing.T) (*httptest.Server, *idempotentServer) {
	t.Helper()
	fake := &idempotentServer{entries: map[string]*entry{}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return srv, fake
}

// nonIdempotentServer executes every request and never replays.
func newNonIdempotentServer(t *testing.T) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		id := n
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"pay_%d"}`, id)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// divergentServer executes once per key but its replays carry a different
// body every time.
func newDivergentServer(t *testing.T) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		seen[key]++
		n := seen[key]
		mu.Unlock()
		if n > 1 {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"pay_1","served_at":%d}`, n)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// closedURL returns the URL of a loopback listener that has been closed.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "http://" + addr + "/payments"
}

// ---- helpers ------------------------------------------------------------

type jsonOut struct {
	Verdict          string             `json:"verdict"`
	Requests         int                `json:"requests"`
	Responses        int                `json:"responses"`
	Retries          int                `json:"retries"`
	ElapsedMS        float64            `json:"elapsed_ms"`
	ThroughputRPS    float64            `json:"throughput_rps"`
	LatencyMS        map[string]float64 `json:"latency_ms"`
	StatusCounts     map[string]int     `json:"status_counts"`
	Originals        int                `json:"originals"`
	Replays          int                `json:"replays"`
	InProgress       int                `json:"in_progress"`
	Errors           int                `json:"errors"`
	TransportErrors  int                `json:"transport_errors"`
	ServerErrors     int                `json:"server_errors"`
	Keys             int                `json:"keys"`
	KeysPassed       int                `json:"keys_passed"`
	KeysFailed       int                `json:"keys_failed"`
	RetryLater       int                `json:"retry_later"`
	OversizeReplays  int                `json:"oversize_replays"`
	KeysInconclusive int                `json:"keys_inconclusive"`
	KeysUnproven     int                `json:"keys_unproven"`
	Probe            struct {
		Enabled   bool `json:"enabled"`
		Sent      int  `json:"sent"`
		Identical int  `json:"identical"`
		Executed  int  `json:"executed"`
		Divergent int  `json:"divergent"`
		NotFinal  int  `json:"not_final"`
	} `json:"probe"`
	Count *struct {
		Field  string `json:"field"`
		Before int64  `json:"before"`
		After  *int64 `json:"after"`
		Delta  *int64 `json:"delta"`
		Want   int    `json:"want"`
		Error  string `json:"error"`
	} `json:"count"`
	Failures     []jsonKey `json:"failures"`
	Inconclusive []jsonKey `json:"inconclusive"`
	Error        string    `json:"error"`
}

type jsonKey struct {
	Key        string         `json:"key"`
	Rule       string         `json:"rule"`
	Reason     string         `json:"reason"`
	Originals  int            `json:"originals"`
	Replays    int            `json:"replays"`
	InProgress int            `json:"in_progress"`
	RetryLater int            `json:"retry_later"`
	Statuses   map[string]int `json:"statuses"`
	Probe      string         `json:"probe"`
}

func runCommand(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Command(t.Context(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func runJSON(t *testing.T, args ...string) (int, jsonOut, string) {
	t.Helper()
	code, stdout, stderr := runCommand(t, append([]string{"--json"}, args...)...)
	var j jsonOut
	require.NoError(t, json.Unmarshal([]byte(stdout), &j), "stdout: %q stderr: %q", stdout, stderr)
	require.Equal(t, 1, strings.Count(strings.TrimSpace(stdout), "\n")+1, "one JSON line")
	return code, j, stderr
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// ---- tests --------------------------------------------------------------

func TestCorrectServerPasses(t *testing.T) {
	srv, fake := newIdempotentServer(t)
	code, j, stderr := runJSON(t, "--url", srv.URL+"/payments", "--keys", "20", "--dups", "8",
		"--concurrency", "16", "--body", `{"amount":100}`)
	require.Equal(t, 0, code, stderr)
	require.Empty(t, stderr, "no progress line on a non-terminal stderr")
	require.Equal(t, "pass", j.Verdict)
	require.Equal(t, 20, j.Originals)
	require.Equal(t, 20, fake.Executions())
	require.Equal(t, 160, j.Requests)
	require.Equal(t, 160, j.Responses)
	require.Equal(t, 160, j.Originals+j.Replays+j.InProgress)
	require.Equal(t, 20, j.KeysPassed)
	require.Zero(t, j.KeysFailed)
	require.Zero(t, j.KeysInconclusive)
	require.True(t, j.Probe.Enabled)
	require.Equal(t, 20, j.Probe.Sent)
	require.Equal(t, 20, j.Probe.Identical)
	require.Zero(t, j.Errors)
	// Replays are 201 too: on a loaded machine a duplicate may arrive
	// after the 20ms side effect and get its replay instead of 409.
	require.Equal(t, j.Originals+j.Replays, j.StatusCounts["201"])
	require.Equal(t, j.InProgress, j.StatusCounts["409"])
	require.Empty(t, j.Failures)
	require.Positive(t, j.LatencyMS["max"])
	require.GreaterOrEqual(t, j.LatencyMS["max"], j.LatencyMS["p99"])
	require.GreaterOrEqual(t, j.LatencyMS["p99"], j.LatencyMS["p50"])
	require.Positive(t, j.ThroughputRPS)
}

func TestCorrectServerRetry409GetsFinalAnswers(t *testing.T) {
	srv, fake := newIdempotentServer(t)
	code, j, stderr := runJSON(t, "--url", srv.URL, "--keys", "10", "--dups", "6",
		"--concurrency", "12", "--retry-409")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "pass", j.Verdict)
	require.Equal(t, 10, j.Originals)
	require.Equal(t, 10, fake.Executions())
	// Every logical request ended with a final answer.
	require.Equal(t, 60, j.Originals+j.Replays)
	require.Zero(t, j.KeysInconclusive)
	require.Equal(t, j.InProgress, j.Retries, "every 409 was retried")
	require.Equal(t, 60+j.Retries, j.Requests)
	require.Zero(t, j.StatusCounts["409"]-j.InProgress)
}

func TestCorrectServerTextReport(t *testing.T) {
	srv, _ := newIdempotentServer(t)
	code, stdout, stderr := runCommand(t, "--url", srv.URL+"/payments", "--keys", "50", "--dups", "10",
		"--concurrency", "32", "--body", `{"amount":100}`)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "verdict: PASS")
	require.Contains(t, stdout, "originals      50\n")
	require.Contains(t, stdout, "50 passed, 0 failed, 0 inconclusive")
	require.Contains(t, stdout, "late probe     50 keys probed: 50 identical replays")
	t.Logf("text report:\n%s", stdout)
}

func TestNonIdempotentServerFails(t *testing.T) {
	srv := newNonIdempotentServer(t)
	code, j, stderr := runJSON(t, "--url", srv.URL, "--keys", "12", "--dups", "3", "--concurrency", "8")
	require.Equal(t, 1, code, stderr)
	require.Equal(t, "fail", j.Verdict)
	require.Equal(t, 36, j.Originals)
	require.Equal(t, 12, j.KeysFailed)
	require.Len(t, j.Failures, 10, "failures are capped at 10")
	for _, f := range j.Failures {
		require.Regexp(t, uuidRE, f.Key)
		require.Contains(t, f.Reason, "executed 3 times")
		require.Equal(t, 3, f.Originals)
		require.Equal(t, map[string]int{"201": 3}, f.Statuses)
	}

	code, stdout, _ := runCommand(t, "--url", srv.URL, "--keys", "2", "--dups", "2")
	require.Equal(t, 1, code)
	require.Contains(t, stdout, "verdict: FAIL (2 of 2 keys failed)")
	require.Contains(t, stdout, "executed 2 times")
	t.Logf("failing text report:\n%s", stdout)
}

func TestDivergentServerFails(t *testing.T) {
	srv := newDivergentServer(t)
	code, j, stderr := runJSON(t, "--url", srv.URL, "--keys", "5", "--dups", "4", "--concurrency", "8")
	require.Equal(t, 1, code, stderr)
	require.Equal(t, "fail", j.Verdict)
	require.Equal(t, 5, j.Originals)
	require.Equal(t, 15, j.Replays)
	require.Equal(t, 5, j.KeysFailed)
	require.Len(t, j.Failures, 5)
	for _, f := range j.Failures {
		require.Contains(t, f.Reason, "divergent")
		require.Contains(t, f.Reason, "4 distinct final responses")
		require.NotContains(t, f.Reason, "executed")
		require.Equal(t, 1, f.Originals)
	}
}

func TestUsageErrors(t *testing.T) {
	bodyFile := filepath.Join(t.TempDir(), "body.json")
	require.NoError(t, os.WriteFile(bodyFile, []byte(`{}`), 0o600))
	const u = "http://127.0.0.1:1/x"
	cases := map[string][]string{
		"missing url":          {},
		"body and body-file":   {"--url", u, "--body", `{}`, "--body-file", bodyFile},
		"empty body and file":  {"--url", u, "--body", "", "--body-file", bodyFile},
		"header without colon": {"--url", u, "-H", "X-Tenant acme"},
		"header bad name":      {"--url", u, "-H", "X Tenant: acme"},
		"header empty name":    {"--url", u, "-H", ": acme"},
		"header key override":  {"--url", u, "-H", "idempotency-key: mine"},
		"header key override2": {"--url", u, "--key-header", "X-Request-Key", "-H", "x-request-key: mine"},
		"bad key header":       {"--url", u, "--key-header", "X Key"},
		"count url alone":      {"--url", u, "--count-url", u},
		"count field alone":    {"--url", u, "--count-field", "n"},
		"bad count url":        {"--url", u, "--count-url", "stats", "--count-field", "n"},
		"count field twice":    {"--url", u, "--count-url", u, "--count-field", "n", "--count-field", "n=2"},
		"count field bad N":    {"--url", u, "--count-url", u, "--count-field", "n=two"},
		"count field N < 0":    {"--url", u, "--count-url", u, "--count-field", "n=-1"},
		"count field no name":  {"--url", u, "--count-url", u, "--count-field", "=1"},
		"settle without count": {"--url", u, "--settle", "1s"},
		"negative settle":      {"--url", u, "--count-url", u, "--count-field", "n", "--settle", "-1s"},
		"history in no dir":    {"--url", u, "--history", filepath.Join(t.TempDir(), "no", "such", "dir.jsonl")},
		"bad scheme":           {"--url", "ftp://example.com/x"},
		"no scheme":            {"--url", "localhost:8080/x"},
		"no host":              {"--url", "http:///x"},
		"unparsable url":       {"--url", "http://[::1"},
		"zero keys":            {"--url", u, "--keys", "0"},
		"negative dups":        {"--url", u, "--dups", "-1"},
		"zero concurrency":     {"--url", u, "--concurrency", "0"},
		"zero timeout":         {"--url", u, "--timeout", "0s"},
		"bad method":           {"--url", u, "--method", "PO ST"},
		"missing body file":    {"--url", u, "--body-file", filepath.Join(t.TempDir(), "nope")},
		"unknown flag":         {"--url", u, "--nope"},
		"positional argument":  {"--url", u, "extra"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runCommand(t, args...)
			require.Equal(t, 2, code)
			require.Empty(t, stdout)
			require.NotEmpty(t, stderr)
		})
	}

	code, stdout, stderr := runCommand(t, "-h")
	require.Equal(t, 0, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "Usage: idemkey storm --url URL")
	for _, name := range []string{"-url", "-method", "-body", "-body-file", "-H", "-keys", "-dups",
		"-concurrency", "-timeout", "-retry", "-retry-409", "-no-probe", "-key-header", "-count-url", "-count-field", "-json"} {
		require.Regexp(t, `(?m)^  `+regexp.QuoteMeta(name)+`( |$)`, stderr)
	}
}

func TestConnectionRefused(t *testing.T) {
	u := closedURL(t)
	code, j, stderr := runJSON(t, "--url", u, "--keys", "3", "--dups", "2", "--timeout", "5s")
	require.Equal(t, 2, code)
	require.Equal(t, "inconclusive", j.Verdict)
	require.Equal(t, 3, j.KeysInconclusive)
	require.Equal(t, 6, j.Requests)
	require.Equal(t, 6, j.TransportErrors)
	require.Zero(t, j.Responses)
	require.Zero(t, j.KeysFailed)
	require.Contains(t, j.Error, "all 6 requests failed")
	require.Contains(t, stderr, "refused")

	code, stdout, _ := runCommand(t, "--url", u, "--keys", "1", "--dups", "1")
	require.Equal(t, 2, code)
	require.Contains(t, stdout, "verdict: INCONCLUSIVE (no HTTP response")
}

func TestHeadersAndBodyArrive(t *testing.T) {
	type seen struct {
		method, key, tenant, ctype, ua, host string
		multi                                []string
		body                                 string
	}
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, seen{
			method: r.Method, key: r.Header.Get("Idempotency-Key"), tenant: r.Header.Get("X-Tenant"),
			ctype: r.Header.Get("Content-Type"), ua: r.Header.Get("User-Agent"), host: r.Host,
			multi: r.Header.Values("X-Multi"), body: string(b),
		})
		first := len(got) == 1
		mu.Unlock()
		if !first {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)

	check := func(t *testing.T, method, body, ctype string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, got, 7, "6 duplicates and the late probe")
		perKey := map[string]int{}
		for _, s := range got {
			require.Equal(t, method, s.method)
			require.Regexp(t, uuidRE, s.key)
			require.Equal(t, "acme", s.tenant)
			require.Equal(t, []string{"a", "b"}, s.multi)
			require.Equal(t, ctype, s.ctype)
			require.Equal(t, "idemkey-storm", s.ua)
			require.Equal(t, body, s.body)
			perKey[s.key]++
		}
		require.Equal(t, map[string]int{got[0].key: 7}, perKey)
		got = nil
	}

	code, _, stderr := runCommand(t, "--url", srv.URL, "--method", "PUT", "--keys", "1", "--dups", "6",
		"-H", "X-Tenant: acme", "-H", "X-Multi: a", "-H", "x-multi:b", "--body", `{"amount":42}`)
	require.Equal(t, 0, code, stderr)
	check(t, "PUT", `{"amount":42}`, "application/json")

	bodyFile := filepath.Join(t.TempDir(), "body.txt")
	require.NoError(t, os.WriteFile(bodyFile, []byte("amount=7\n"), 0o600))
	code, _, stderr = runCommand(t, "--url", srv.URL, "--keys", "1", "--dups", "6", "--body-file", bodyFile,
		"-H", "X-Tenant:acme", "-H", "X-Multi: a", "-H", "X-Multi: b", "-H", "Content-Type: text/plain")
	require.Equal(t, 0, code, stderr)
	check(t, "POST", "amount=7\n", "text/plain")

	// Without a body no Content-Type is invented, and -H Host sets the Host.
	code, _, stderr = runCommand(t, "--url", srv.URL, "--method", "DELETE", "--keys", "1", "--dups", "6",
		"-H", "X-Tenant: acme", "-H", "X-Multi: a", "-H", "X-Multi: b", "-H", "Host: api.example")
	require.Equal(t, 0, code, stderr)
	mu.Lock()
	require.Equal(t, "api.example", got[0].host)
	mu.Unlock()
	check(t, "DELETE", "", "")
}

// TestDuplicatesOverlap checks that all duplicates of a key are in flight
// together: the handler holds every request until all duplicates of its key
// have arrived, which can only happen if they overlap.
func TestDuplicatesOverlap(t *testing.T) {
	const keys, dups = 4, 5
	var mu sync.Mutex
	arrived := map[string]int{}
	barrier := map[string]chan struct{}{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		ch, ok := barrier[key]
		if !ok {
			ch = make(chan struct{})
			barrier[key] = ch
		}
		arrived[key]++
		if arrived[key] == dups {
			close(ch)
		}
		n := arrived[key]
		mu.Unlock()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			http.Error(w, "duplicates did not overlap", http.StatusTeapot)
			return
		}
		if n > 1 {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		_, _ = io.WriteString(w, "done")
	}))
	t.Cleanup(srv.Close)

	rep, err := Run(t.Context(), Config{URL: srv.URL, Keys: keys, Dups: dups, Concurrency: dups})
	require.NoError(t, err)
	require.True(t, rep.Pass(), "%+v", rep)
	require.Equal(t, map[int]int{200: keys * dups}, rep.StatusCounts)
	require.Equal(t, keys, rep.Originals)
}

func TestServiceUnavailableIsNotAnExecution(t *testing.T) {
	// The first request of each key fails with 503 and releases the key; the
	// next one executes and is stored; the rest are replays.
	var mu sync.Mutex
	state := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		state[key]++
		n := state[key]
		mu.Unlock()
		switch n {
		case 1:
			http.Error(w, "try again", http.StatusServiceUnavailable)
		case 2:
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"x"}`)
		default:
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"x"}`)
		}
	}))
	t.Cleanup(srv.Close)

	rep, err := Run(t.Context(), Config{URL: srv.URL, Keys: 6, Dups: 4, Concurrency: 8})
	require.NoError(t, err)
	require.True(t, rep.Pass(), "%+v", rep.Failures)
	require.Equal(t, 0, rep.ExitCode())
	require.Equal(t, 6, rep.Originals)
	require.Equal(t, 12, rep.Replays)
	require.Equal(t, 6, rep.RetryLater)
	require.Zero(t, rep.ServerErrors)
	require.Zero(t, rep.Errors)
	require.Equal(t, 6, rep.Probe.Identical)
	require.Equal(t, map[int]int{503: 6, 201: 18}, rep.StatusCounts)
}

func TestRunBodyForAndKeyPrefix(t *testing.T) {
	var mu sync.Mutex
	bodies := map[string]map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		if bodies[key] == nil {
			bodies[key] = map[string]int{}
		}
		bodies[key][string(b)]++
		first := bodies[key][string(b)] == 1
		mu.Unlock()
		if !first {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)

	calls := map[int]string{}
	rep, err := Run(t.Context(), Config{
		URL: srv.URL, Keys: 5, Dups: 3, Concurrency: 4, KeyPrefix: "demo-",
		Body: []byte("ignored"),
		BodyFor: func(key string, i int) []byte {
			calls[i] = key
			return fmt.Appendf(nil, `{"payment":%d,"key":%q}`, i, key)
		},
	})
	require.NoError(t, err)
	require.True(t, rep.Pass(), "%+v", rep.Failures)
	require.Len(t, calls, 5)
	require.Len(t, bodies, 5)
	for i, key := range calls {
		require.True(t, strings.HasPrefix(key, "demo-"))
		require.Regexp(t, uuidRE, strings.TrimPrefix(key, "demo-"))
		// 3 duplicates and the late probe
		require.Equal(t, map[string]int{fmt.Sprintf(`{"payment":%d,"key":%q}`, i, key): 4}, bodies[key])
	}
}

func TestRunInvalidConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no url":       {},
		"bad scheme":   {URL: "file:///etc/passwd"},
		"negative":     {URL: "http://127.0.0.1:1", Keys: -1},
		"bad header":   {URL: "http://127.0.0.1:1", Header: http.Header{"Bad Name": {"x"}}},
		"header value": {URL: "http://127.0.0.1:1", Header: http.Header{"X-A": {"a\r\nb"}}},
		"method":       {URL: "http://127.0.0.1:1", Method: "GE T"},
		"timeout":      {URL: "http://127.0.0.1:1", Timeout: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			rep, err := Run(t.Context(), cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.Nil(t, rep)
		})
	}
}

func TestRunInterrupted(t *testing.T) {
	started := make(chan struct{})
	var once sync.Once
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(started) })
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs before srv.Close

	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-started
		cancel()
	}()
	rep, err := Run(ctx, Config{URL: srv.URL, Keys: 50, Dups: 4, Concurrency: 8, Timeout: 30 * time.Second})
	require.ErrorIs(t, err, context.Canceled)
	require.NotNil(t, rep)
	require.True(t, rep.Interrupted)
	require.False(t, rep.Pass())
	require.Equal(t, 2, rep.ExitCode())
	require.Equal(t, rep.Requests, rep.TransportErrors, "the requests in flight are recorded, interrupted")
	require.Zero(t, rep.Timeouts, "cancelled requests are not timeouts")
}

func TestTimeoutIsTransportError(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Slow") != "" {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })

	rep, err := Run(t.Context(), Config{URL: srv.URL, Keys: 2, Dups: 2, Concurrency: 4,
		Timeout: 50 * time.Millisecond, Header: http.Header{"X-Slow": {"1"}}})
	require.NoError(t, err)
	require.Equal(t, 4, rep.TransportErrors)
	require.Equal(t, 2, rep.ExitCode())
	require.Contains(t, rep.Error, "deadline exceeded")
}

func TestProgress(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		mu.Lock()
		defer mu.Unlock()
		if key := r.Header.Get("Idempotency-Key"); seen[key] {
			w.Header().Set("Idempotent-Replayed", "true")
		} else {
			seen[key] = true
		}
	}))
	t.Cleanup(srv.Close)

	var progress syncBuffer
	done := make(chan struct{})
	var rep *Report
	var runErr error
	go func() {
		defer close(done)
		rep, runErr = Run(t.Context(), Config{URL: srv.URL, Keys: 2, Dups: 2, Concurrency: 4, Progress: &progress})
	}()
	require.Eventually(t, func() bool {
		return strings.Contains(progress.String(), "storm: 0/4 requests done, 4 in flight")
	}, 5*time.Second, 10*time.Millisecond)
	close(release)
	<-done
	require.NoError(t, runErr)
	require.True(t, rep.Pass())
	out := progress.String()
	require.True(t, strings.HasPrefix(out, "\r"))
	require.True(t, strings.HasSuffix(out, "\r"), "the line is cleared at the end: %q", out)
	require.NotContains(t, out, "\n")
}

func TestIsTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(); _ = w.Close() })
	require.False(t, isTerminal(w))
	require.False(t, isTerminal(&bytes.Buffer{}))
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	require.False(t, isTerminal(f))
}

func TestRetryDelay(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := map[string]time.Duration{
		"0":                             0,
		"2":                             2 * time.Second,
		" 0.25 ":                        250 * time.Millisecond,
		"3600":                          30 * time.Second,
		"Fri, 02 Jan 2026 03:04:08 GMT": 3 * time.Second,
		"Fri, 02 Jan 2026 03:04:00 GMT": 0,
		"Sat, 03 Jan 2026 03:04:05 GMT": 30 * time.Second,
	}
	for in, want := range cases {
		require.Equal(t, want, retryDelay(in, 5, now), "Retry-After %q", in)
	}
	// Without a usable Retry-After: below 100ms, doubling, at most 2s (jittered).
	for _, in := range []string{"", "-1", "NaN", "+Inf", "soon"} {
		for n, ceiling := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
			800 * time.Millisecond, 1600 * time.Millisecond, 2 * time.Second, 2 * time.Second} {
			d := retryDelay(in, n, now)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.Less(t, d, ceiling+time.Nanosecond, "Retry-After %q, retry %d", in, n)
		}
		require.LessOrEqual(t, retryDelay(in, 1000, now), 2*time.Second)
	}
}

func TestRetryable(t *testing.T) {
	// 500, 502 and 504 as idemclient retries them: idemkey released the
	// key, and the retry runs it.
	for _, status := range []int{408, 409, 425, 429, 503, 500, 502, 504} {
		require.True(t, retryable(status, false, nil), "%d", status)
		require.False(t, retryable(status, true, nil), "a replayed %d is final", status)
	}
	for _, status := range []int{200, 201, 400, 404, 422, 501, 505} {
		require.False(t, retryable(status, false, nil), "%d", status)
	}
	require.True(t, retryable(0, false, io.ErrUnexpectedEOF))
}

func TestIsTooLarge(t *testing.T) {
	p := func(typ string, status int) []byte {
		return fmt.Appendf(nil, `{"type":%q,"title":"Response too large to replay","status":%d,"detail":"..."}`, typ, status)
	}
	require.True(t, isTooLarge(p("https://github.com/idemkey/idemkey/blob/main/docs/problems.md#response-too-large", 201), 201))
	require.True(t, isTooLarge(p("urn:example:response-too-large", 200), 200))
	require.False(t, isTooLarge(p("https://example.com/problems#response-too-large", 200), 201), "another status")
	require.False(t, isTooLarge(p("https://example.com/problems#key-reused", 422), 422))
	require.False(t, isTooLarge([]byte(`not json`), 200))
	require.False(t, isTooLarge(append(p("x#response-too-large", 200), make([]byte, maxProblemBytes)...), 200))
}

func TestPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, Latency{P50: 50 * time.Millisecond, P90: 90 * time.Millisecond,
		P99: 99 * time.Millisecond, Max: 100 * time.Millisecond}, percentiles(ds))
	require.Equal(t, Latency{}, percentiles(nil))
	one := percentiles([]time.Duration{time.Second})
	require.Equal(t, Latency{P50: time.Second, P90: time.Second, P99: time.Second, Max: time.Second}, one)
}

func TestNewKey(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		k := newKey()
		require.Regexp(t, uuidRE, k)
		require.False(t, seen[k])
		seen[k] = true
	}
}

type syncBuffer = syncbuf.Buffer
