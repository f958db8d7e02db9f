// Package observetest drives a scripted sequence of requests through httpmw
// on a private redis-server, with the stores reporting to an Observer under
// test, so that the metrics and tracing adapters (the prometheus and otel
// modules) can assert what each step adds.
package observetest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/observe/metrics"
	"github.com/idemkey/idemkey/redisstore"
)

// The steps of the sequence, in order, and what each does. Routes are the
// ServeMux patterns: "POST /pay", "POST /slow", "POST /stall", "POST /panic".
const (
	// First: a first request (POST /pay): claimed, completed 201.
	First = "first"
	// Replay: the same request again: replayed.
	Replay = "replay"
	// InProgress: a slow request (POST /slow) is claimed and holds its key;
	// a duplicate gets 409. The slow one is still running when After runs.
	InProgress = "in progress"
	// InProgressDone: the slow request completes.
	InProgressDone = "in progress done"
	// Mismatch: the first request's key with another body: 422.
	Mismatch = "mismatch"
	// Rejected: a request without a key: 400, no Redis call.
	Rejected = "rejected"
	// Takeover: a run on a second store (lease 300ms, MaxDuration 100ms,
	// same observer) is claimed and stalls; once its lease has run out, a
	// retry on the first store takes the key over (attempt 2) and completes.
	// The stalled run still holds its lease as far as this process knows.
	Takeover = "takeover"
	// Fenced: the stalled run finishes; its outcome is refused (lease lost).
	Fenced = "fenced"
	// Panic: a handler panics (POST /panic): claimed, released; 500 from
	// the recoverer outside the middleware.
	Panic = "panic"
	// RedisDown: redis-server is killed; a new request gets 503.
	RedisDown = "redis down"
)

// Steps lists the steps in order.
var Steps = []string{First, Replay, InProgress, InProgressDone, Mismatch, Rejected, Takeover, Fenced, Panic, RedisDown}

// Want holds, for each step, the series of the metrics (package
// observe/metrics) that it changes and by how much: the counters by
// requests, takeovers and fenced, the histogram's count by calls, the gauge
// under Leases. The heartbeats (calls("extend")), whose number depends on
// timing, are left out.
var Want = map[string]map[string]float64{
	First:  {requests("POST /pay", "executed"): 1, calls("claim"): 1, calls("complete"): 1},
	Replay: {requests("POST /pay", "replayed"): 1, calls("claim"): 1},
	// The slow run holds its lease while the duplicate gets 409.
	// The duplicate is answered by the process that runs the key: no Redis call.
	InProgress:     {requests("POST /slow", "in_progress"): 1, calls("claim"): 1, Leases: 1},
	InProgressDone: {requests("POST /slow", "executed"): 1, calls("complete"): 1, Leases: -1},
	Mismatch:       {requests("POST /pay", "mismatch"): 1, calls("claim"): 1},
	Rejected:       {requests("POST /pay", "rejected"): 1},
	// The stalled run's claim and the takeover's; the stalled run still
	// holds its lease as far as this process knows.
	Takeover: {route("idemkey_takeovers_total", "POST /stall"): 1, requests("POST /stall", "executed"): 1,
		calls("claim"): 2, calls("complete"): 1, Leases: 1},
	Fenced: {route("idemkey_fenced_total", "POST /stall"): 1, requests("POST /stall", "executed"): 1,
		calls("complete"): 1, Leases: -1},
	Panic:     {requests("POST /panic", "released"): 1, calls("claim"): 1, calls("release"): 1},
	RedisDown: {requests("POST /pay", "unavailable"): 1, calls("claim"): 1},
}

// Leases is the series of idemkey_leases_held.
const Leases = "idemkey_leases_held{}"

func requests(route, outcome string) string {
	return fmt.Sprintf("idemkey_requests_total{outcome=%q,route=%q}", outcome, route)
}

func route(name, route string) string { return fmt.Sprintf("%s{route=%q}", name, route) }

func calls(script string) string {
	return fmt.Sprintf("idemkey_redis_seconds_count{script=%q}", script)
}

// Series names a series as Want does: name{label="value",...}, labels in
// name order (pairs is name, value, name, value...).
func Series(name string, pairs ...string) string {
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	for i := 0; i+1 < len(pairs); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", pairs[i], pairs[i+1])
	}
	b.WriteByte('}')
	return b.String()
}

// Delta returns what changed from before to after, without the heartbeats
// (extend).
func Delta(before, after map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		if strings.Contains(k, `script="extend"`) {
			continue
		}
		if v != before[k] {
			d[k] = v - before[k]
		}
	}
	for k, v := range before {
		if _, ok := after[k]; !ok {
			d[k] = -v
		}
	}
	return d
}

// Config is what Run needs.
type Config struct {
	// Observer receives the events and calls of both stores.
	Observer observe.Observer
	// Wrap, if set, wraps each server's handler (outside the recoverer), as a
	// tracing middleware would.
	Wrap func(http.Handler) http.Handler
	// Before, if set, is called on the test goroutine before each step.
	Before func(step string)
	// After is called on the test goroutine after each step.
	After func(step string)
	// Do, if set, gives the context of each of Hostile's Store.Do calls
	// and what to call when it returns, as a traced caller would.
	Do func(ctx context.Context) (context.Context, func())
}

const token = "Bearer sk_observetest"

// rig is what both drivers run on: a private redis-server and three stores
// on it, two reporting to obs.
type rig struct {
	srv *redistest.Server
	// main runs with the defaults; stalling's runs lose their lease soon
	// after MaxDuration (stallLease); probe is not observed.
	main, stalling, probe *redisstore.Store
}

// stallLease is the lease of rig.stalling, MaxDuration a third of it.
const stallLease = 300 * time.Millisecond

func newRig(t *testing.T, obs observe.Observer) *rig {
	r := &rig{srv: redistest.Start(t)}
	client := func() *redis.Client {
		o := r.srv.Options()
		o.MaxRetries = -1 // Redis down: fail at once
		c := redis.NewClient(o)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	var err error
	r.main, err = redisstore.New(client(), redisstore.Options{Observer: obs})
	require.NoError(t, err)
	r.stalling, err = redisstore.New(client(), redisstore.Options{Observer: obs, Lease: stallLease,
		Heartbeat: stallLease / 3, MaxDuration: stallLease / 3})
	require.NoError(t, err)
	r.probe, err = redisstore.New(client(), redisstore.Options{})
	require.NoError(t, err)
	return r
}

// waitLeaseOut waits, without asking through the observed stores, until the
// lease of the started record of (scope, key) has run out.
func (r *rig) waitLeaseOut(t *testing.T, scope, key string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		rec, err := r.probe.Lookup(context.Background(), scope, key)
		require.NoError(t, err)
		require.Equal(t, redisstore.Started, rec.State)
		if rec.LeaseTTL == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "the stalled run's lease did not run out within 20s")
		time.Sleep(20 * time.Millisecond)
	}
}

// serve starts a test server on h, wrapped as cfg says.
func serve(t *testing.T, cfg Config, h http.Handler) *httptest.Server {
	if cfg.Wrap != nil {
		h = cfg.Wrap(h)
	}
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// middleware is httpmw on store, logging nowhere.
func middleware(store *redisstore.Store) func(http.Handler) http.Handler {
	return httpmw.New(store, httpmw.Options{Logger: slog.New(slog.DiscardHandler)})
}

// created answers 201.
func created(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte("done"))
}

// newRequest is a POST with the caller's token and, unless key is "", an
// Idempotency-Key.
func newRequest(base, path, key, body string) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", token)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return req, nil
}

// scope is the scope of the requests newRequest makes.
func scope(t *testing.T) string {
	r, err := newRequest("", "/", "", "")
	require.NoError(t, err)
	s, err := httpmw.DefaultScope(r)
	require.NoError(t, err)
	return s
}

// Run runs the sequence; it skips the test when redis-server is missing.
func Run(t *testing.T, cfg Config) {
	obs := &counted{Observer: cfg.Observer}
	rig := newRig(t, obs)
	srv, main, stalling := rig.srv, rig.main, rig.stalling

	slowStarted, slowGo := make(chan struct{}, 1), make(chan struct{})
	stallStarted, stallGo := make(chan struct{}, 1), make(chan struct{})
	openSlow := sync.OnceFunc(func() { close(slowGo) })
	openStall := sync.OnceFunc(func() { close(stallGo) })

	server := func(store *redisstore.Store, stall bool) *httptest.Server {
		mw := middleware(store)
		mux := http.NewServeMux()
		mux.Handle("POST /pay", mw(http.HandlerFunc(created)))
		mux.Handle("POST /slow", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			slowStarted <- struct{}{}
			<-slowGo
			created(w, r)
		})))
		mux.Handle("POST /stall", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if stall {
				stallStarted <- struct{}{}
				<-stallGo // past MaxDuration: its heartbeat stops and its lease runs out
			}
			created(w, r)
		})))
		mux.Handle("POST /panic", mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			panic("observetest: the handler panics")
		})))
		return serve(t, cfg, recoverer(mux))
	}
	mainSrv, stallSrv := server(main, false), server(stalling, true)
	t.Cleanup(openSlow) // before the servers close: no handler stays blocked
	t.Cleanup(openStall)

	type answer struct {
		status int
		err    error
	}
	send := func(base, path, key, body string) answer {
		req, err := newRequest(base, path, key, body)
		if err != nil {
			return answer{err: err}
		}
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			return answer{err: err}
		}
		_ = resp.Body.Close()
		return answer{status: resp.StatusCode}
	}
	post := func(base, path, key, body string) int {
		a := send(base, path, key, body)
		require.NoError(t, a.err)
		return a.status
	}
	postAsync := func(base, path, key string) <-chan answer {
		ch := make(chan answer, 1)
		go func() { ch <- send(base, path, key, `{}`) }()
		return ch
	}
	wait := func(ch <-chan answer) int {
		select {
		case a := <-ch:
			require.NoError(t, a.err)
			return a.status
		case <-time.After(30 * time.Second):
			t.Fatal("observetest: no answer within 30s")
			return 0
		}
	}
	started := func(ch <-chan struct{}) {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatal("observetest: the handler did not start within 30s")
		}
	}
	var ended int64
	step := func(name string, run func()) {
		if cfg.Before != nil {
			cfg.Before(name)
		}
		run()
		// Each step ends one request; its event may come a moment after
		// the client has the answer.
		ended++
		deadline := time.Now().Add(10 * time.Second)
		for obs.ended.Load() < ended {
			require.True(t, time.Now().Before(deadline), "step %q: the request's last event did not come within 10s", name)
			time.Sleep(time.Millisecond)
		}
		cfg.After(name)
	}

	var slow <-chan answer
	step(First, func() { require.Equal(t, http.StatusCreated, post(mainSrv.URL, "/pay", "k1", `{"a":1}`)) })
	step(Replay, func() { require.Equal(t, http.StatusCreated, post(mainSrv.URL, "/pay", "k1", `{"a":1}`)) })
	step(InProgress, func() {
		slow = postAsync(mainSrv.URL, "/slow", "k2")
		started(slowStarted)
		require.Equal(t, http.StatusConflict, post(mainSrv.URL, "/slow", "k2", `{}`))
	})
	step(InProgressDone, func() {
		openSlow()
		require.Equal(t, http.StatusCreated, wait(slow))
	})
	step(Mismatch, func() {
		require.Equal(t, http.StatusUnprocessableEntity, post(mainSrv.URL, "/pay", "k1", `{"a":2}`))
	})
	step(Rejected, func() { require.Equal(t, http.StatusBadRequest, post(mainSrv.URL, "/pay", "", `{}`)) })
	var stalled <-chan answer
	step(Takeover, func() {
		stalled = postAsync(stallSrv.URL, "/stall", "k3")
		started(stallStarted)
		rig.waitLeaseOut(t, scope(t), "k3")
		require.Equal(t, http.StatusCreated, post(mainSrv.URL, "/stall", "k3", `{}`))
	})
	step(Fenced, func() {
		openStall()
		// Its outcome is not stored, and its client gets 409 (a retry gets
		// the takeover's answer), not a second answer for the key.
		require.Equal(t, http.StatusConflict, wait(stalled), "the stalled run's client gets 409; its outcome is not stored")
	})
	step(Panic, func() { require.Equal(t, http.StatusInternalServerError, post(mainSrv.URL, "/panic", "k4", `{}`)) })
	step(RedisDown, func() {
		srv.Kill()
		require.Equal(t, http.StatusServiceUnavailable, post(mainSrv.URL, "/pay", "k5", `{}`))
	})
}

// counted passes events and calls on, and counts the events that end a
// request once they are passed on.
type counted struct {
	observe.Observer
	ended atomic.Int64
}

func (c *counted) Event(ctx context.Context, e *observe.Event) {
	if metrics.Outcome(e.Kind) != "" {
		defer c.ended.Add(1) // also when the observer panics
	}
	c.Observer.Event(ctx, e)
}

// recoverer answers 500 for a panicking handler, as applications do outside
// the idempotency middleware.
func recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}
