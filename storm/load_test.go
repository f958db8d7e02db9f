package storm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// loadJSON is the part of --json's output that load mode adds.
type loadJSON struct {
	jsonOut
	Mode       string `json:"mode"`
	Timeouts   int    `json:"timeouts"`
	ReplayOnly int    `json:"replay_only"`
	Operations struct {
		Scheduled, Started, Completed, Failed, Late int
		NotStarted                                  int `json:"not_started"`
	} `json:"operations"`
	Attempts         int                `json:"attempts"`
	Amplification    float64            `json:"amplification"`
	Goodput          float64            `json:"goodput"`
	AchievedRate     float64            `json:"achieved_rate"`
	AttemptLatencyMS map[string]float64 `json:"attempt_latency_ms"`
	StartLagMS       map[string]float64 `json:"start_lag_ms"`
	Thresholds       []struct {
		Name         string
		Limit, Value float64
		OK           bool
	} `json:"thresholds"`
	Timeline []struct {
		T               int      `json:"t"`
		Operations      int      `json:"operations"`
		Late            int      `json:"late"`
		Attempts        int      `json:"attempts"`
		Amplification   *float64 `json:"amplification"`
		Originals       int      `json:"originals"`
		Replays         int      `json:"replays"`
		InProgress      int      `json:"in_progress"`
		RetryLater      int      `json:"retry_later"`
		ServerErrors    int      `json:"server_errors"`
		Timeouts        int      `json:"timeouts"`
		TransportErrors int      `json:"transport_errors"`
		P50MS           *float64 `json:"p50_ms"`
		P99MS           *float64 `json:"p99_ms"`
	} `json:"timeline"`
}

func runLoadJSON(t *testing.T, args ...string) (int, loadJSON, string) {
	t.Helper()
	code, stdout, stderr := runCommand(t, append([]string{"--json"}, args...)...)
	var j loadJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &j), "stdout: %q stderr: %q", stdout, stderr)
	return code, j, stderr
}

// slowServer is a correct idempotent endpoint whose side effect takes slow
// for the operations whose body's "n" is in [from, to), and no time for
// the others: a dependency that slows down for a while. Concurrent
// attempts of a key get 409 while it runs, later ones the replay.
type slowServer struct {
	from, to int
	slow     time.Duration

	mu         sync.Mutex
	entries    map[string]*entry
	executions map[string]int
}

func (s *slowServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct{ N int }
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &body)
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	e, ok := s.entries[key]
	if !ok {
		e = &entry{}
		s.entries[key] = e
		s.executions[key]++
		s.mu.Unlock()
		if body.N >= s.from && body.N < s.to {
			time.Sleep(s.slow) // the run outlives its client
		}
		s.mu.Lock()
		e.done, e.status, e.body = true, http.StatusCreated, fmt.Appendf(nil, `{"payment":%d}`, body.N)
		s.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(e.body)
		return
	}
	done, body2 := e.done, e.body
	s.mu.Unlock()
	if !done {
		w.Header().Set("Retry-After", "0.1")
		http.Error(w, "in progress", http.StatusConflict)
		return
	}
	w.Header().Set("Idempotent-Replayed", "true")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body2)
}

func (s *slowServer) counts() (keys, executions, multi int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.executions {
		keys++
		executions += n
		if n > 1 {
			multi++
		}
	}
	return keys, executions, multi
}

// A dependency slow for the operations of second 1 of a six-second run:
// the clients' attempts time out and are retried with the same key, so
// amplification rises above 1 in the next second, where the retries go,
// not before, nor once the retries are over; and every operation still
// ran exactly once. The attempt timeout (1s) is far above
// what a fast answer takes even on a stalled machine, and the slow runs
// (2.5s) far above it: with 400ms and 1.2s, a fast answer delayed by a
// busy machine timed out too (25 timeouts for 20 slow operations).
func TestLoadSlowWindowAmplifies(t *testing.T) {
	const rate = 20
	fake := &slowServer{from: 1 * rate, to: 2 * rate, slow: 2500 * time.Millisecond, entries: map[string]*entry{}, executions: map[string]int{}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)

	args := []string{"--url", srv.URL, "--rate", strconv.Itoa(rate), "--duration", "6s",
		"--attempt-timeout", "1s", "--backoff", "10ms,50ms", "--retries", "30", "--body", `{"n":{n}}`}
	code, j, stderr := runLoadJSON(t, args...)
	if code != 0 {
		_, text, _ := runCommand(t, args...)
		t.Log(text)
	}
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "pass", j.Verdict, "%+v %+v", j.Failures, j.Inconclusive)
	require.Equal(t, "load", j.Mode)
	keys, executions, multi := fake.counts()
	require.Equal(t, 6*rate, keys)
	require.Equal(t, 6*rate, executions, "every operation ran once")
	require.Zero(t, multi)
	require.Equal(t, 6*rate, j.Operations.Scheduled)
	require.Equal(t, 6*rate, j.Operations.Started)
	require.Equal(t, 6*rate, j.Operations.Completed)
	require.Zero(t, j.Operations.Failed)
	require.Greater(t, j.Amplification, 1.0)
	require.Equal(t, j.Attempts, j.Requests)
	require.Equal(t, rate, j.Timeouts, "the first attempt of every slow operation, and nothing else")
	require.GreaterOrEqual(t, len(j.Timeline), 6, "six seconds scheduled")

	for _, s := range j.Timeline {
		sum := s.Originals + s.Replays + s.InProgress + s.RetryLater + s.ServerErrors + s.Timeouts + s.TransportErrors
		require.Equal(t, s.Attempts, sum, "second %d: the classes partition the attempts", s.T)
	}
	for _, sec := range []int{0, 5} { // before the slow window, and well after its retries
		s := j.Timeline[sec]
		require.Equal(t, rate, s.Operations, "second %d", sec)
		// One attempt per operation; the last one scheduled in a second
		// may be sent in the next.
		require.Equal(t, s.Attempts, s.Originals, "second %d: nothing but first attempts", sec)
		require.InDelta(t, 1.0, *s.Amplification, 0.1, "second %d", sec)
	}
	s := j.Timeline[1] // the slow window
	require.Equal(t, rate, s.Operations)
	require.GreaterOrEqual(t, s.Timeouts, rate/2, "the slow operations' first attempts time out")
	// Their retries come a second later, after the attempt timeout, and
	// count in the second the operations were scheduled in: at least two
	// attempts each, most of them.
	require.Greater(t, *s.Amplification, 1.5)
	require.Greater(t, *s.P50MS, 1000.0, "latency from the scheduled start")
	require.Less(t, *j.Timeline[0].P50MS, 1000.0)
}

// doubleServer runs a key again when a retry comes before the first run
// has stored its answer: the first run of every key is slow, the client
// gives up on it and retries, and the retry runs it a second time. Its
// answers look right (one original, then replays); only the side-effect
// count shows the double charge.
type doubleServer struct {
	mu      sync.Mutex
	runs    map[string]int
	stored  map[string][]byte
	charges int
}

func (s *doubleServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/stats" {
		s.mu.Lock()
		defer s.mu.Unlock()
		fmt.Fprintf(w, `{"charges": %d}`, s.charges)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	if b, ok := s.stored[key]; ok {
		s.mu.Unlock()
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(b)
		return
	}
	s.runs[key]++
	first := s.runs[key] == 1
	s.charges++
	s.mu.Unlock()
	if first {
		time.Sleep(400 * time.Millisecond)
	}
	body := fmt.Appendf(nil, `{"key":%q}`, key)
	s.mu.Lock()
	if _, ok := s.stored[key]; !ok {
		s.stored[key] = body
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
}

func TestLoadDoubleExecutionFails(t *testing.T) {
	t.Run("hidden behind a timeout, caught by the count", func(t *testing.T) {
		fake := &doubleServer{runs: map[string]int{}, stored: map[string][]byte{}}
		srv := httptest.NewServer(fake)
		t.Cleanup(srv.Close)
		args := []string{"--url", srv.URL + "/pay", "--rate", "20", "--duration", "500ms",
			"--attempt-timeout", "100ms", "--backoff", "10ms,20ms"}
		// Its answers look right, one original and replays after a
		// timeout; but the attempt that timed out may have run too, so
		// at most once is unproven without a count, never passed.
		code, j, stderr := runLoadJSON(t, args...)
		require.Equal(t, 1, code, stderr)
		require.Equal(t, "inconclusive", j.Verdict)
		require.Equal(t, 10, j.KeysUnproven)
		require.Equal(t, 10, j.Originals, "every key: one original after its first attempt timed out")
		require.Equal(t, 10, j.Timeouts)

		code, j, stderr = runLoadJSON(t, append(args, "--count-url", srv.URL+"/stats", "--count-field", "charges")...)
		require.Equal(t, 1, code, stderr)
		require.Equal(t, "fail", j.Verdict)
		require.Equal(t, 10, j.KeysUnproven, "the count's total cannot say which key ran twice")
		require.Equal(t, int64(20), *j.Count.Delta, "two charges per key")

		code, text, _ := runCommand(t, args...)
		require.Equal(t, 1, code)
		require.Contains(t, text, "count          not checked (no --count-url): 10 keys unproven")
	})
	t.Run("seen in the answers", func(t *testing.T) {
		srv := newNonIdempotentServer(t)
		code, j, stderr := runLoadJSON(t, "--url", srv.URL, "--rate", "20", "--duration", "500ms", "--dups", "2")
		require.Equal(t, 1, code, stderr)
		require.Equal(t, "fail", j.Verdict)
		require.Equal(t, 10, j.KeysFailed)
		require.Equal(t, 20, j.Originals)
		require.Equal(t, 10, j.Operations.Completed)
		for _, f := range j.Failures {
			require.Contains(t, f.Reason, "executed 2 times")
		}
	})
}

// --max-in-flight 1 against a server that takes 300ms an answer: every
// operation after the first finds the slot taken and starts late, and its
// latency counts from its scheduled start, the wait included.
func TestLoadLateStart(t *testing.T) {
	fake := &slowServer{from: 0, to: 10, slow: 300 * time.Millisecond, entries: map[string]*entry{}, executions: map[string]int{}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	code, j, stderr := runLoadJSON(t, "--url", srv.URL, "--rate", "100", "--duration", "100ms", "--max-in-flight", "1",
		"--body", `{"n":{n}}`, "--no-probe")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "pass", j.Verdict)
	require.Equal(t, 10, j.Operations.Started)
	require.Equal(t, 10, j.Operations.Completed)
	require.Equal(t, 9, j.Operations.Late, "all but the first waited for the slot")
	require.Equal(t, 9, j.Timeline[0].Late)
	require.Equal(t, 10, j.Attempts)
	require.GreaterOrEqual(t, j.LatencyMS["max"], 2700.0, "the last one waited for nine others")
	require.GreaterOrEqual(t, j.StartLagMS["max"], 2400.0)
}

func TestLoadThresholds(t *testing.T) {
	srv, _ := newIdempotentServer(t)
	base := []string{"--url", srv.URL, "--rate", "50", "--duration", "400ms"}

	code, j, stderr := runLoadJSON(t, append(base, "--max-p99", "1h", "--min-goodput", "1", "--max-amplification", "1.5")...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "pass", j.Verdict)
	require.Len(t, j.Thresholds, 3)
	for _, th := range j.Thresholds {
		require.True(t, th.OK, "%+v", th)
	}

	code, j, stderr = runLoadJSON(t, append(base, "--max-amplification", "0.5", "--min-goodput", "1000", "--max-p99", "1h")...)
	require.Equal(t, 1, code, "broken thresholds fail the run: %s", stderr)
	require.Equal(t, "pass", j.Verdict, "the verdict is still computed")
	names := map[string]bool{}
	for _, th := range j.Thresholds {
		names[th.Name] = th.OK
	}
	require.Equal(t, map[string]bool{"max-p99": true, "max-amplification": false, "min-goodput": false}, names)
	require.Equal(t, 20, j.Operations.Completed)
	require.InDelta(t, 50, j.Goodput, 0.01)

	code, text, _ := runCommand(t, append(base, "--max-amplification", "0.5")...)
	require.Equal(t, 1, code)
	require.Contains(t, text, "verdict: PASS\nthresholds: BROKEN (max-amplification 1 > 0.5)")

	code, j, _ = runLoadJSON(t, base...)
	require.Equal(t, 0, code)
	require.NotNil(t, j.Thresholds)
	require.Empty(t, j.Thresholds)
}

func TestLoadUsageErrors(t *testing.T) {
	const u = "http://127.0.0.1:1/x"
	for name, args := range map[string][]string{
		"zero rate":             {"--url", u, "--rate", "0"},
		"negative rate":         {"--url", u, "--rate", "-5"},
		"zero duration":         {"--url", u, "--duration", "0s"},
		"keys in load mode":     {"--url", u, "--rate", "10", "--keys", "5"},
		"concurrency":           {"--url", u, "--rate", "10", "--concurrency", "5"},
		"retry":                 {"--url", u, "--rate", "10", "--retry"},
		"max in flight zero":    {"--url", u, "--rate", "10", "--max-in-flight", "0"},
		"negative retries":      {"--url", u, "--rate", "10", "--retries", "-1"},
		"backoff one value":     {"--url", u, "--rate", "10", "--backoff", "100ms"},
		"backoff reversed":      {"--url", u, "--rate", "10", "--backoff", "2s,1s"},
		"backoff zero":          {"--url", u, "--rate", "10", "--backoff", "0s,1s"},
		"negative threshold":    {"--url", u, "--rate", "10", "--max-amplification", "-1"},
		"report in burst mode":  {"--url", u, "--report", "x.html"},
		"retries in burst mode": {"--url", u, "--retries", "2"},
		"too many operations":   {"--url", u, "--rate", "100000", "--duration", "1h"},
		"negative peak":         {"--url", u, "--rate", "10", "--max-peak-amplification", "-1"},
		"exactly once in burst": {"--url", u, "--min-exactly-once-goodput", "5"},
		"peak in burst":         {"--url", u, "--max-peak-amplification", "2"},
	} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runCommand(t, args...)
			require.Equal(t, 2, code, stderr)
			require.Empty(t, stdout)
			require.NotEmpty(t, stderr)
		})
	}
	code, _, stderr := runCommand(t, "-h")
	require.Equal(t, 0, code)
	for _, name := range []string{"-rate", "-duration", "-max-in-flight", "-dups", "-attempt-timeout", "-retries",
		"-backoff", "-report", "-max-p99", "-max-amplification", "-min-goodput", "-min-exactly-once-goodput",
		"-max-peak-amplification", "-history", "-count-field"} {
		require.Regexp(t, `(?m)^  `+name+`( |$)`, stderr)
	}
}

// The HTML report is one file that fetches nothing, and its charts carry
// the timeline's numbers (TestDemoStormReportInChromium checks the same in
// a browser).
func TestLoadHTMLReport(t *testing.T) {
	fake := &slowServer{from: 10, to: 20, slow: 400 * time.Millisecond, entries: map[string]*entry{}, executions: map[string]int{}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	file := filepath.Join(t.TempDir(), "report.html")
	code, j, stderr := runLoadJSON(t, "--url", srv.URL, "--rate", "20", "--duration", "1500ms", "--attempt-timeout", "150ms",
		"--backoff", "10ms,20ms", "--retries", "20", "--body", `{"n":{n}}`, "--report", file, "--max-amplification", "0.5")
	require.Equal(t, 1, code, "the threshold is broken: %s", stderr)
	require.Equal(t, "pass", j.Verdict)
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	page := string(b)
	require.True(t, strings.HasPrefix(page, "<!DOCTYPE html>"))
	require.NotRegexp(t, `(?i)(src|href)="(https?:)?//`, page, "nothing fetched from the network")
	require.NotContains(t, page, "<script")
	require.Contains(t, page, `data-verdict="pass"`)
	require.Contains(t, page, `data-threshold="max-amplification" data-ok="false"`)
	require.Contains(t, page, "not checked (no --count-url)")
	total := 0
	for _, m := range regexp.MustCompile(`data-t="(\d+)" data-class="(\w+)" data-count="(\d+)"`).FindAllStringSubmatch(page, -1) {
		n, _ := strconv.Atoi(m[3])
		total += n
	}
	require.Equal(t, j.Attempts, total, "the bars add up to the attempts")
	for _, s := range j.Timeline {
		if s.Amplification != nil {
			require.Contains(t, page, fmt.Sprintf(`data-series="amplification" data-t="%d" data-value="%v"`, s.T, *s.Amplification))
			require.Contains(t, page, fmt.Sprintf(`data-series="p99" data-t="%d" data-value="%v"`, s.T, *s.P99MS))
		}
	}

	// The burst mode has no timeline to draw.
	rep, err := Run(t.Context(), Config{URL: srv.URL, Keys: 1, Dups: 1, Body: []byte(`{"n":99}`)})
	require.NoError(t, err)
	require.Error(t, rep.WriteHTML(io.Discard))
}

// Cancelled mid-run, load mode stops scheduling, records the attempts in
// flight as interrupted transport errors and returns the partial report.
func TestLoadInterrupted(t *testing.T) {
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
	t.Cleanup(func() { close(release) })

	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-started
		cancel()
	}()
	begin := time.Now()
	rep, err := Run(ctx, Config{URL: srv.URL, Rate: 50, Duration: time.Minute})
	require.ErrorIs(t, err, context.Canceled)
	// Liveness: a run of a minute ends with its context; 30s is half.
	require.Less(t, time.Since(begin), 30*time.Second)
	require.True(t, rep.Interrupted)
	require.Equal(t, VerdictInconclusive, rep.Verdict())
	require.NotNil(t, rep.Load)
	require.Equal(t, 3000, rep.Load.Operations.Scheduled)
	require.Positive(t, rep.Load.Operations.NotStarted)
	require.Positive(t, rep.TransportErrors, "the attempts in flight are recorded")
	require.Equal(t, rep.Requests, rep.TransportErrors, "no answer came: every attempt was interrupted")
	require.Zero(t, rep.Timeouts)
	require.Empty(t, rep.Error, "interrupted, not a server without answers")
}

// An attempt in flight when the storm is interrupted was sent, and may
// have run: the history records it, a transport error whose error is
// "interrupted" (it was dropped before), in both modes.
func TestInterruptedAttemptsAreRecorded(t *testing.T) {
	for _, mode := range []string{"burst", "load"} {
		t.Run(mode, func(t *testing.T) {
			arrived := make(chan struct{}, 100)
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				select {
				case <-r.Context().Done():
				case <-release:
				}
			}))
			t.Cleanup(srv.Close)
			t.Cleanup(func() { close(release) })

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var history bytes.Buffer
			cfg := Config{URL: srv.URL, Keys: 2, Dups: 1, Concurrency: 2, History: &history}
			if mode == "load" {
				cfg = Config{URL: srv.URL, Rate: 1000, Duration: 2 * time.Millisecond, History: &history}
			}
			go func() {
				for range 2 {
					<-arrived
				}
				cancel()
			}()
			rep, err := Run(ctx, cfg)
			require.ErrorIs(t, err, context.Canceled)
			require.True(t, rep.Interrupted)
			h, err := ReadHistory(&history)
			require.NoError(t, err)
			var attempts []Attempt
			for _, op := range h.Operations {
				attempts = append(attempts, op.Attempts...)
			}
			require.Len(t, attempts, 2, "both attempts the server got")
			for _, a := range attempts {
				require.Equal(t, ClassTransportError, a.Class)
				require.Equal(t, "interrupted", a.Error)
				require.False(t, a.Retried)
			}
			require.Equal(t, 2, rep.TransportErrors)
			require.Equal(t, VerdictInconclusive, rep.Verdict())
		})
	}
}
