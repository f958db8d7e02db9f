package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/redisstore"
)

// The built idemkey against small servers on loopback: the storm's verdict
// is a check over the history it wrote, and 'idemkey check' of that history
// says the same.

// verdictJSON is the part of the storm's and check's --json these tests read.
type verdictJSON struct {
	Verdict      string `json:"verdict"`
	Keys         int    `json:"keys"`
	KeysPassed   int    `json:"keys_passed"`
	KeysUnproven int    `json:"keys_unproven"`
	Timeouts     int    `json:"timeouts"`
	Retried5xx   int    `json:"retried_server_errors"`
	Rules        []struct {
		Name                         string
		Failed, Inconclusive, Passed int
	} `json:"rules"`
	Counts map[string]struct {
		Delta *int64 `json:"delta"`
		Want  int    `json:"want"`
		OK    bool   `json:"ok"`
	} `json:"counts"`
}

// stormThenCheck runs the storm with --json and --history, then 'idemkey
// check' on the history, and holds that both print the same report and
// exit the same way.
func stormThenCheck(t *testing.T, args ...string) (int, verdictJSON) {
	t.Helper()
	history := filepath.Join(t.TempDir(), "history.jsonl")
	r := runBin(t, 60*time.Second, append([]string{"storm", "--json", "--history", history}, args...)...)
	require.Contains(t, []int{0, 1}, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	var j verdictJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &j), r.stdout)

	c := runBin(t, 60*time.Second, "check", history, "--json")
	require.Equal(t, r.code, c.code, "check's exit status; stderr:\n%s", c.stderr)
	require.JSONEq(t, r.stdout, c.stdout, "check's report")
	return r.code, j
}

// locklessServer dedupes the keys it has completed but holds nothing while
// one runs: the first attempt of every key charges and then waits until
// the key's retry has arrived (the client gave up on it), and the retry,
// finding nothing stored, charges again. Both store the same answer, so
// the late probe gets a matching replay: the answers look right.
type locklessServer struct {
	mu      sync.Mutex
	stored  map[string][]byte
	retried map[string]chan struct{}
	charges atomic.Int64
}

func (s *locklessServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/stats" {
		fmt.Fprintf(w, `{"charges": %d}`, s.charges.Load())
		return
	}
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	if body, ok := s.stored[key]; ok {
		s.mu.Unlock()
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
		return
	}
	ch, seen := s.retried[key]
	if !seen {
		ch = make(chan struct{})
		s.retried[key] = ch
	} else {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
	s.mu.Unlock()
	s.charges.Add(1) // the side effect, before anything is stored
	if !seen {
		// The slow first attempt: it outlives the client's patience, and
		// is still running when the retry comes. Bounded, so that a broken
		// storm cannot hang the server.
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
		}
	}
	body := fmt.Appendf(nil, `{"payment":%q}`, key)
	s.mu.Lock()
	s.stored[key] = body
	s.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
}

// A server that holds no lock while a key runs, its first attempts slow:
// every key runs twice, and its answers (one original after a timeout, a
// matching replay for the probe) cannot show it. The storm never passes
// it: without a count the keys are unproven, with one the storm fails.
func TestStormNeverPassesALocklessServerWithSlowFirstAttempts(t *testing.T) {
	fake := &locklessServer{stored: map[string][]byte{}, retried: map[string]chan struct{}{}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	const ops = 10
	args := []string{"--url", srv.URL + "/pay", "--rate", "20", "--duration", "500ms",
		"--attempt-timeout", "200ms", "--backoff", "10ms,20ms"}

	code, j := stormThenCheck(t, args...)
	require.Equal(t, 1, code)
	require.Equal(t, "inconclusive", j.Verdict)
	require.Equal(t, ops, j.KeysUnproven)
	require.Equal(t, ops, j.Timeouts, "every first attempt timed out")
	require.Equal(t, "at-most-once", j.Rules[0].Name)
	require.Equal(t, ops, j.Rules[0].Inconclusive)
	require.Equal(t, int64(2*ops), fake.charges.Load(), "every key ran twice")

	code, j = stormThenCheck(t, append(args, "--count-url", srv.URL+"/stats", "--count-field", "charges")...)
	require.Equal(t, 1, code)
	require.Equal(t, "fail", j.Verdict)
	require.Equal(t, int64(2*ops), *j.Counts["charges"].Delta)
	require.False(t, j.Counts["charges"].OK)
}

// A correct server (idemkey's httpmw on miniredis) whose handler answers
// one transient 500 per key: the middleware releases the key, storm
// retries as idemclient does, the retry runs and is stored. The 500 is
// neither an execution nor a final answer: the storm passes, the count
// grown by exactly one per key.
func TestStormPassesACorrectServerWithATransient500PerKey(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, redisstore.Options{})
	require.NoError(t, err)
	var charges atomic.Int64
	var mu sync.Mutex
	failed := map[string]bool{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		first := !failed[key]
		failed[key] = true
		mu.Unlock()
		if first {
			http.Error(w, "provider hiccup", http.StatusInternalServerError)
			return
		}
		n := charges.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, n)
	})
	mux := http.NewServeMux()
	mux.Handle("/pay", httpmw.New(store, httpmw.Options{Scope: func(*http.Request) (string, error) { return "storm", nil }})(handler))
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, `{"charges": %d}`, charges.Load()) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	const ops = 10
	code, j := stormThenCheck(t, "--url", srv.URL+"/pay", "--body", `{"amount":1}`, "--rate", "20", "--duration", "500ms",
		"--backoff", "10ms,20ms", "--count-url", srv.URL+"/stats", "--count-field", "charges")
	require.Equal(t, 0, code)
	require.Equal(t, "pass", j.Verdict)
	require.Equal(t, ops, j.KeysPassed)
	require.Equal(t, ops, j.Retried5xx, "one 500 per key, retried")
	require.Equal(t, int64(ops), *j.Counts["charges"].Delta, "exactly one charge per key")
	require.Equal(t, "retries-not-final", j.Rules[1].Name)
	require.Equal(t, ops, j.Rules[1].Passed)
	require.Equal(t, int64(ops), charges.Load())
}
