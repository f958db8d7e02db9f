// Package contracttest is the HTTP contract suite that every idemkey
// adapter (ginmw, httpmw) must pass, against a real redis-server and
// against miniredis. An adapter's test calls Run with a Mount that puts the
// adapter in front of the suite's application handler.
package contracttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/internal/httpcore"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/redisstore"
)

// Mount returns app behind the adapter under test, configured with store and opts.
type Mount func(t testing.TB, store *redisstore.Store, opts httpmw.Options, app http.Handler) http.Handler

// backend is a Redis the suite runs against.
type backend struct {
	srv *redistest.Server    // nil for miniredis
	mr  *miniredis.Miniredis // nil for redis-server
	// pipelined puts the stores on their client's auto-pipeliner
	// (redis.Client.AutoPipeline) instead of on the client itself.
	pipelined bool
}

// on returns b's mode on another redis-server.
func (b backend) on(srv *redistest.Server) backend { return backend{srv: srv, pipelined: b.pipelined} }

func (b backend) options() *redis.Options {
	if b.srv != nil {
		return b.srv.Options()
	}
	return &redis.Options{Addr: b.mr.Addr(), ContextTimeoutEnabled: true}
}

// client opens a client of its own, as another process would.
func (b backend) client(t testing.TB) *redis.Client {
	o := b.options()
	o.MaxRetries = -1 // fault tests want failures, not retries
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// scripter opens a client of its own, as client does, and returns what a
// store runs its scripts on: the client, or in pipelined mode its
// auto-pipeliner, one shared instance per client, closed (before the client)
// when the test ends.
func (b backend) scripter(t testing.TB) redis.Scripter {
	c := b.client(t)
	if !b.pipelined {
		return c
	}
	return redistest.AutoPipeliner(t, c)
}

// env is one application instance: app behind the adapter, on a real HTTP server.
type env struct {
	t     *testing.T
	b     backend
	rdb   redis.Scripter
	store *redisstore.Store
	app   *app
	h     http.Handler
	srv   *httptest.Server
}

type envConfig struct {
	store  redisstore.Options
	opts   httpmw.Options
	client redis.Scripter // default: b.scripter
	app    *app           // default: a fresh app
}

func newEnv(t *testing.T, b backend, mount Mount, cfg envConfig) *env {
	t.Helper()
	e := &env{t: t, b: b, rdb: cfg.client, app: cfg.app}
	if e.rdb == nil {
		e.rdb = b.scripter(t)
	}
	if e.app == nil {
		e.app = newApp()
	}
	var err error
	e.store, err = redisstore.New(e.rdb, cfg.store)
	require.NoError(t, err)
	e.h = mount(t, e.store, cfg.opts, e.app.handler())
	e.srv = httptest.NewServer(e.h)
	t.Cleanup(e.srv.Close)
	t.Cleanup(e.app.open) // before the server closes: no handler stays blocked
	return e
}

// storeOptions returns store options that report to obs.
func storeOptions(obs observe.Observer) redisstore.Options { return redisstore.Options{Observer: obs} }

// response is what a client got.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r *response) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

// problemType returns the slug of a problem+json response's type.
func (r *response) problemType(t testing.TB) string {
	t.Helper()
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"), "body: %s", r.body)
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	require.NoError(t, json.Unmarshal(r.body, &p))
	require.Equal(t, r.status, p.Status)
	require.NotEmpty(t, p.Title)
	require.NotEmpty(t, p.Detail)
	require.True(t, strings.HasPrefix(p.Type, httpcore.DefaultProblemBase), p.Type)
	return strings.TrimPrefix(p.Type, httpcore.DefaultProblemBase)
}

// req describes a request; zero fields get defaults.
type req struct {
	method, path, key, body, contentType, auth string
	noKey, noAuth                              bool
	header                                     http.Header
}

func (e *env) newRequest(r req) *http.Request {
	if r.method == "" {
		r.method = http.MethodPost
	}
	if r.path == "" {
		r.path = "/payments"
	}
	if r.contentType == "" {
		r.contentType = "application/json"
	}
	if r.auth == "" {
		r.auth = "Bearer alice"
	}
	hr := httptest.NewRequest(r.method, e.srv.URL+r.path, strings.NewReader(r.body))
	hr.RequestURI = ""
	hr.Header.Set("Content-Type", r.contentType)
	if !r.noAuth {
		hr.Header.Set("Authorization", r.auth)
	}
	if !r.noKey {
		hr.Header.Set("Idempotency-Key", r.key)
	}
	for k, v := range r.header {
		hr.Header[k] = v
	}
	return hr
}

// do sends r over HTTP. Call it from the test goroutine only; others use try.
func (e *env) do(r req) *response {
	e.t.Helper()
	resp, err := e.try(r)
	require.NoError(e.t, err)
	return resp
}

// try sends r over HTTP and reports a failure instead of failing the test,
// so that goroutines other than the test's may call it.
func (e *env) try(r req) (*response, error) {
	hr := e.newRequest(r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := e.srv.Client().Do(hr.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

// serve runs r in-process, for requests a real client would refuse to send
// (control bytes in headers) and handlers that panic.
func (e *env) serve(hr *http.Request) *response {
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, hr)
	return &response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

// keys returns the names of the keys in the env's Redis, to show that
// nothing was stored (requireNoNewKeys).
func (e *env) keys() map[string]bool {
	e.t.Helper()
	names, err := e.b.client(e.t).Keys(context.Background(), "*").Result()
	require.NoError(e.t, err)
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return set
}

// requireNoNewKeys fails unless every key in Redis now was there before
// (keys(), earlier). It compares names, not counts: a record an earlier
// subtest stored may expire meanwhile (a count of 52 for 53 under load).
func (e *env) requireNoNewKeys(t *testing.T, before map[string]bool) {
	t.Helper()
	for k := range e.keys() {
		require.True(t, before[k], "a key was stored: %s", k)
	}
}

var seq atomic.Int64

// newKey returns an idempotency key no other test uses.
func newKey() string {
	return "key-" + strconv.FormatInt(seq.Add(1), 10) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// app is the application behind the middleware: it counts its executions
// per idempotency key and can be made slow, failing or crashing.
type app struct {
	mu      sync.Mutex
	runs    map[string]int // executions by key
	charges map[string]int // side effects by key (the payment endpoint)
	total   atomic.Int64
	gate    chan struct{} // /slow and /checkpoint wait on it
	opened  sync.Once
	started chan string  // /slow and /checkpoint report their start
	fails   atomic.Int64 // /flaky fails while positive
	// attempts are the attempt numbers /cutoff ran with, by key.
	attempts map[string][]int
	// causes receives why /cutoff's context ended.
	causes chan error
}

func newApp() *app {
	return &app{runs: map[string]int{}, charges: map[string]int{}, gate: make(chan struct{}), started: make(chan string, 1000),
		attempts: map[string][]int{}, causes: make(chan error, 100)}
}

// open lets every waiting handler finish.
func (a *app) open() { a.opened.Do(func() { close(a.gate) }) }

func (a *app) count(r *http.Request) int64 {
	key := httpcore.Key(r.Context())
	a.mu.Lock()
	a.runs[key]++
	a.mu.Unlock()
	return a.total.Add(1)
}

func (a *app) runsOf(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runs[key]
}

func (a *app) attemptsOf(key string) []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.attempts[key]
}

func (a *app) chargesOf(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.charges[key]
}

func (a *app) handler() http.Handler {
	mux := http.NewServeMux()
	// A payment: 201 with a fresh ID and its Location.
	pay := func(w http.ResponseWriter, r *http.Request) {
		n := a.count(r)
		body, _ := io.ReadAll(r.Body)
		id := fmt.Sprintf("pay_%d", n)
		w.Header().Set("Location", "/payments/"+id)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Add("X-Multi", "one")
		w.Header().Add("X-Multi", "two")
		http.SetCookie(w, &http.Cookie{Name: "session", Value: id})
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q,"request":%s,"run":%d}`, id, orNull(body), n)
	}
	mux.HandleFunc("/payments", pay)
	mux.HandleFunc("/status/{code}", func(w http.ResponseWriter, r *http.Request) {
		a.count(r)
		code, _ := strconv.Atoi(r.PathValue("code"))
		w.WriteHeader(code)
		fmt.Fprintf(w, "status %d, run %d", code, a.total.Load())
	})
	// Fails with 503 while fails > 0, then succeeds.
	mux.HandleFunc("/flaky", func(w http.ResponseWriter, r *http.Request) {
		n := a.count(r)
		if a.fails.Add(-1) >= 0 {
			http.Error(w, "dependency down", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "created on run %d", n)
	})
	mux.HandleFunc("/panic", func(w http.ResponseWriter, r *http.Request) {
		n := a.count(r)
		if n == 1 {
			w.Header().Set("X-Half", "written")
			w.WriteHeader(http.StatusCreated)
			panic("handler crashed")
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "created on run %d", n)
	})
	// Waits for the gate, then answers.
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		n := a.count(r)
		a.started <- httpcore.Key(r.Context())
		<-a.gate
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "slow run %d", n)
	})
	// Sleeps ?ms=, then answers: for bursts.
	mux.HandleFunc("/sleep", func(w http.ResponseWriter, r *http.Request) {
		n := a.count(r)
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		time.Sleep(time.Duration(ms) * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"run":%d}`, n)
	})
	// A two-step operation: charge (the side effect), checkpoint, then wait
	// for the gate; a takeover resumes after the charge.
	mux.HandleFunc("/checkpoint", func(w http.ResponseWriter, r *http.Request) {
		a.count(r)
		ctx := r.Context()
		key := httpcore.Key(ctx)
		charge, _ := httpcore.RecoveryPoint(ctx)
		if charge == "" {
			a.mu.Lock()
			a.charges[key]++
			a.mu.Unlock()
			if err := httpcore.Checkpoint(ctx, "charged", []byte("ch_"+key)); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			a.started <- key
			<-a.gate
		}
		_, data := httpcore.RecoveryPoint(ctx)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "paid, charge %s (resumed %t)", data, data != nil)
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		a.count(r)
		http.Redirect(w, r, "/payments/pay_9", http.StatusSeeOther)
	})
	mux.HandleFunc("/nobody", func(w http.ResponseWriter, r *http.Request) {
		a.count(r)
		w.Header().Set("X-Done", "yes")
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		a.count(r)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(bytes.Repeat([]byte{0xAB}, 64<<10))
	})
	// Charges, then works until the gate opens; a handler that honours its
	// context gives up halfway, after the charge, with a 500.
	mux.HandleFunc("/ctxwork", func(w http.ResponseWriter, r *http.Request) {
		a.count(r)
		key := httpcore.Key(r.Context())
		a.mu.Lock()
		a.charges[key]++
		a.mu.Unlock()
		a.started <- key
		select {
		case <-a.gate:
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, "charged and ordered")
		case <-r.Context().Done():
			http.Error(w, "cancelled after the charge", http.StatusInternalServerError)
		}
	})
	// A first attempt charges, then works until the gate opens or its
	// context ends (503: it gave up after the charge); a later attempt
	// (a takeover) knows an earlier one may have charged and finishes.
	mux.HandleFunc("/cutoff", func(w http.ResponseWriter, r *http.Request) {
		a.count(r)
		ctx := r.Context()
		key := httpcore.Key(ctx)
		attempt := httpcore.Attempt(ctx)
		a.mu.Lock()
		a.attempts[key] = append(a.attempts[key], attempt)
		if attempt <= 1 {
			a.charges[key]++
		}
		a.mu.Unlock()
		if attempt > 1 {
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "finished by attempt %d", attempt)
			return
		}
		a.started <- key
		select {
		case <-a.gate:
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, "finished by attempt 1")
		case <-ctx.Done():
			a.causes <- context.Cause(ctx)
			http.Error(w, "cut off after the charge", http.StatusServiceUnavailable)
		}
	})
	// A cookie set under a header key that is not canonical.
	mux.HandleFunc("/rawcookie", func(w http.ResponseWriter, r *http.Request) {
		a.count(r)
		w.Header()["set-cookie"] = []string{"session=secret"}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "ok")
	})
	// A trailer, declared before the body and set after it.
	mux.HandleFunc("/trailer", func(w http.ResponseWriter, r *http.Request) {
		a.count(r)
		w.Header().Set("Trailer", "X-Checksum")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "body")
		w.Header().Set("X-Checksum", "abc123")
		w.Header().Set(http.TrailerPrefix+"X-Late", "late")
	})
	// An invalid status code, which net/http refuses with a panic.
	mux.HandleFunc("/badcode/{code}", func(w http.ResponseWriter, r *http.Request) {
		a.count(r)
		code, _ := strconv.Atoi(r.PathValue("code"))
		w.WriteHeader(code)
		fmt.Fprint(w, "never")
	})
	// A large body with headers that describe it.
	mux.HandleFunc("/bigdescribed", func(w http.ResponseWriter, r *http.Request) {
		a.count(r)
		body := bytes.Repeat([]byte{0xCD}, 64<<10)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("ETag", `"v1-big"`)
		w.Header().Set("Content-Digest", "sha-256=:abc=:")
		w.Header().Set("Content-Range", "bytes 0-65535/65536")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Header().Set("Content-Encoding", "identity")
		w.Header().Set("X-Keep", "kept")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	})
	// A handler that charges with derived keys and checkpoints, answering
	// 201 "<charge key> <same step again> <refund key> <attempt>" unless the
	// checkpoint fails (500).
	mux.HandleFunc("/steps", func(w http.ResponseWriter, r *http.Request) {
		a.count(r)
		ctx := r.Context()
		charge, again, refund := httpcore.DerivedKey(ctx, "charge"), httpcore.DerivedKey(ctx, "charge"), httpcore.DerivedKey(ctx, "refund")
		if err := httpcore.Checkpoint(ctx, "charged", []byte(charge)); err != nil {
			http.Error(w, "checkpoint: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "%s %s %s %d", charge, again, refund, httpcore.Attempt(ctx))
	})
	// ?n= zero bytes: compresses to almost nothing.
	mux.HandleFunc("/zeros", func(w http.ResponseWriter, r *http.Request) {
		a.count(r)
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(make([]byte, n))
	})
	mux.HandleFunc("/derived", func(w http.ResponseWriter, r *http.Request) {
		a.count(r)
		fmt.Fprint(w, httpcore.DerivedKey(r.Context(), "charge"))
	})
	return mux
}

func orNull(b []byte) string {
	if len(b) == 0 || !json.Valid(b) {
		return "null"
	}
	return string(b)
}
