package storm

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
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

// A dependency slow for two seconds of a five-second run: the clients'
// attempts time out and are retried with the same key, so amplification
// rises above 1 in those seconds and only there, and every operation still
// ran exactly once.
func TestLoadSlowWindowAmplifies(t *testing.T) {
	const rate = 20
	fake := &slowServer{from: 1 * rate, to: 3 * rate, slow: 900 * time.Millisecond, entries: map[string]*entry{}, executions: map[string]int{}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)

	args := []string{"--url", srv.URL, "--rate", strconv.Itoa(rate), "--duration", "5s",
		"--attempt-timeout", "300ms", "--backoff", "10ms,50ms", "--retries", "30", "--body", `{"n":{n}}`}
	code, j, stderr := runLoadJSON(t, args...)
	if code != 0 {
		_, text, _ := runCommand(t, args...)
		t.Log(text)
	}
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "pass", j.Verdict, "%+v %+v", j.Failures, j.Inconclusive)
	require.Equal(t, "load", j.Mode)
	keys, executions, multi := fake.counts()
	require.Equal(t, 5*rate, keys)
	require.Equal(t, 5*rate, executions, "every operation ran once")
	require.Zero(t, multi)
	require.Equal(t, 5*rate, j.Operations.Scheduled)
	require.Equal(t, 5*rate, j.Operations.Started)
	require.Equal(t, 5*rate, j.Operations.Completed)
	require.Zero(t, j.Operations.Failed)
	require.Greater(t, j.Amplification, 1.0)
	require.Equal(t, j.Attempts, j.Requests)
	require.Positive(t, j.Timeouts)
	require.GreaterOrEqual(t, len(j.Timeline), 5, "five seconds scheduled")

	for _, s := range j.Timeline {
		sum := s.Originals + s.Replays + s.InProgress + s.RetryLater + s.ServerErrors + s.Timeouts + s.TransportErrors
		require.Equal(t, s.Attempts, sum, "second %d: the classes partition the attempts", s.T)
	}
	for _, sec := range []int{0, 4} { // before the slow window, and a second after it
		s := j.Timeline[sec]
		require.Equal(t, rate, s.Operations, "second %d", sec)
		// One attempt per operation; the last one scheduled in a second
		// may be sent in the next.
		require.Equal(t, s.Attempts, s.Originals, "second %d: nothing but first attempts", sec)
		require.InDelta(t, 1.0, *s.Amplification, 0.1, "second %d", sec)
	}
	for _, sec := range []int{1, 2} { // the slow window
		s := j.Timeline[sec]
		require.Equal(t, rate, s.Operations, "second %d", sec)
		require.Equal(t, rate, s.Timeouts, "second %d: every first attempt timed out", sec)
		require.Greater(t, *s.Amplification, 1.5, "second %d", sec)
		require.Greater(t, *s.P50MS, 800.0, "second %d: latency from the scheduled start", sec)
	}
	require.Less(t, *j.Timeline[0].P99MS, 300.0)
}
