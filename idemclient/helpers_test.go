package idemclient

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clock is a fake clock whose Sleep returns at once and moves it on.
type clock struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
	// onSleep, if set, runs in Sleep before it returns.
	onSleep func(d time.Duration)
}

func newClock() *clock { return &clock{now: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.slept = append(c.slept, d)
	c.now = c.now.Add(d)
	f := c.onSleep
	c.mu.Unlock()
	if f != nil {
		f(d)
	}
	return ctx.Err()
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *clock) Slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.slept...)
}

// answer is what the app stored for a key.
type answer struct {
	status int
	body   string
}

// app is a minimal idempotent server in the idemkey contract's shape: the
// first request with a key executes (counted) and stores its answer; later
// requests with the key get it replayed with Idempotent-Replayed: true. A
// request without a key executes every time. Hooks inject faults.
type app struct {
	executions atomic.Int64 // handler runs: the side effect

	mu       sync.Mutex
	attempts map[string]int      // per key ("" for none)
	bodies   map[string][]string // request bodies seen, per key
	headers  [][]string          // the Idempotency-Key values of every request, in order
	stored   map[string]answer

	// before, if set, sees the n-th request (1-based) of a key first, and
	// answers it instead of the app when it returns true.
	before func(w http.ResponseWriter, r *http.Request, n int) bool
	// drop, if set, says how to lose the answer of an execution of the
	// n-th request of a key, after it is stored.
	drop func(n int) dropMode
}

type dropMode int

const (
	keep       dropMode = iota
	dropBefore          // close the connection before any byte of the answer
	dropMid             // send the head and part of the body, then close
)

func newApp() *app {
	return &app{attempts: map[string]int{}, bodies: map[string][]string{}, stored: map[string]answer{}}
}

func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	vals := r.Header.Values(HeaderKey)
	key := strings.Join(vals, ",")
	a.mu.Lock()
	a.headers = append(a.headers, vals)
	a.attempts[key]++
	n := a.attempts[key]
	a.bodies[key] = append(a.bodies[key], string(body))
	a.mu.Unlock()

	if a.before != nil && a.before(w, r, n) {
		return
	}
	a.mu.Lock()
	st, ok := a.stored[key]
	if !ok {
		id := a.executions.Add(1)
		st = answer{status: http.StatusCreated, body: fmt.Sprintf(`{"id":"pay_%d","body":%q}`, id, body)}
		if key != "" {
			a.stored[key] = st
		}
	}
	a.mu.Unlock()
	if ok {
		w.Header().Set(HeaderReplayed, "true")
	} else if a.drop != nil {
		switch a.drop(n) {
		case dropBefore:
			panic(http.ErrAbortHandler)
		case dropMid:
			w.Header().Set("Content-Length", fmt.Sprint(len(st.body)))
			w.WriteHeader(st.status)
			_, _ = io.WriteString(w, st.body[:len(st.body)/2])
			_ = http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(st.status)
	_, _ = io.WriteString(w, st.body)
}

func (a *app) Headers() [][]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([][]string(nil), a.headers...)
}

func (a *app) Bodies(key string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.bodies[key]...)
}

// server is an httptest server that counts its connections.
type server struct {
	*httptest.Server
	conns atomic.Int64
}

func newServer(t *testing.T, h http.Handler) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Config.ErrorLog = discardLog()
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// newTransport returns a Transport on a fresh base transport (no shared
// connections between tests), with the fake clock.
func newTransport(t *testing.T, opts Options) (*Transport, *clock) {
	t.Helper()
	c := newClock()
	opts.Now, opts.Sleep = c.Now, c.Sleep
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	tr, err := New(base, opts)
	require.NoError(t, err)
	return tr, c
}

// call sends a request through tr and reads the whole answer.
type reply struct {
	status int
	header http.Header
	body   string
	res    Result
}

func call(t *testing.T, tr http.RoundTripper, req *http.Request) (*reply, error) {
	t.Helper()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	res, ok := ResultOf(resp, nil)
	require.True(t, ok, "the response carries its Result")
	return &reply{status: resp.StatusCode, header: resp.Header, body: string(b), res: res}, nil
}

func mustCall(t *testing.T, tr http.RoundTripper, req *http.Request) *reply {
	t.Helper()
	r, err := call(t, tr, req)
	require.NoError(t, err)
	return r
}

func newRequest(t *testing.T, method, url, body string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	return req
}

// statusOnce answers the first request of a key with status (and h, in
// "Name", "value" pairs), and leaves the rest to the app.
func statusOnce(status int, h ...string) func(http.ResponseWriter, *http.Request, int) bool {
	return statusFor(1, status, h...)
}

// statusFor answers the first k requests of a key with status.
func statusFor(k, status int, h ...string) func(http.ResponseWriter, *http.Request, int) bool {
	return func(w http.ResponseWriter, _ *http.Request, n int) bool {
		if n > k {
			return false
		}
		for i := 0; i+1 < len(h); i += 2 {
			w.Header().Set(h[i], h[i+1])
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"status":%d,"detail":"%s"}`, status, strings.Repeat("x", 2000))
		return true
	}
}

func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }
