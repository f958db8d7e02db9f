package faulttest

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

// via says what a store sends its scripts through. The tests of how the
// store meets Redis's faults (latency, blackholes, lost and re-sent
// batches, Redis or the process killed) run both ways: TestX on the client
// itself, TestXPipelined on its auto-pipeliner. Those that set
// Options.Replicas run on the client only: Replicas needs a *redis.Client
// or *redis.ClusterClient.
type via int

const (
	direct    via = iota // the client itself
	pipelined            // the client's auto-pipeliner (AutoPipeline)
)

// scripter returns what a store sends its scripts through when it goes via
// v: client, or client's auto-pipeliner, one shared instance for every
// store on client, closed when the test ends (before the client).
func (v via) scripter(t *testing.T, client redis.UniversalClient) redis.Scripter {
	t.Helper()
	if v == direct {
		return client
	}
	return redistest.AutoPipeliner(t, client)
}

// app is an httpmw-protected endpoint that counts executions per key, with
// an outer layer that records every key it sees (even those the middleware
// turns away) and stamps each response with a per-request header.
type app struct {
	mu    sync.Mutex
	seen  map[string]bool
	runs  map[string]int
	srv   *httptest.Server
	store *redisstore.Store
}

func newApp(t *testing.T, rdb redis.Scripter, sopts redisstore.Options, opts httpmw.Options, h http.HandlerFunc) *app {
	t.Helper()
	if sopts.Logger == nil {
		sopts.Logger = slog.New(slog.DiscardHandler) // these tests break Redis on purpose
	}
	store, err := redisstore.New(rdb, sopts)
	require.NoError(t, err)
	a := &app{seen: map[string]bool{}, runs: map[string]int{}, store: store}
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			n := a.count(httpmw.Key(r.Context()))
			time.Sleep(2 * time.Millisecond)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"run":%d,"request":%s}`, n, body)
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler) // these tests break Redis on purpose
	}
	if opts.Scope == nil {
		// The credential presented, as by default; storms present none and
		// share one scope.
		opts.Scope = func(r *http.Request) (string, error) {
			if r.Header.Get("Authorization") == "" {
				return "anonymous", nil
			}
			return httpmw.DefaultScope(r)
		}
	}
	inner := httpmw.New(store, opts)(h)
	var seq int
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen[r.Header.Get("Idempotency-Key")] = true
		seq++
		id := seq
		a.mu.Unlock()
		w.Header().Set("X-Request-Id", fmt.Sprint("req-", id)) // per request: must never be replayed
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// count records an execution for key and returns the total so far.
func (a *app) count(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.runs[key]++
	n := 0
	for _, v := range a.runs {
		n += v
	}
	return n
}

func (a *app) runsOf(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runs[key]
}

func (a *app) total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, v := range a.runs {
		n += v
	}
	return n
}

// keys returns every key the app has seen.
func (a *app) keys() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ks []string
	for k := range a.seen {
		ks = append(ks, k)
	}
	return ks
}

// maxRuns returns the most executions of any key.
func (a *app) maxRuns() (key string, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, v := range a.runs {
		if v > n {
			key, n = k, v
		}
	}
	return key, n
}
