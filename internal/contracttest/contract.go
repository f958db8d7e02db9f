package contracttest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

// Run runs the contract suite against a private redis-server, against
// another with the stores on their client's auto-pipeliner (subtest
// "pipelined"), and against miniredis. Subtests that kill Redis run on the
// redis-servers only.
func Run(t *testing.T, mount Mount) {
	// The backends run in parallel, each on its own server: most of a run
	// is waiting (leases, timeouts, retries).
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		run(t, mount, backend{srv: redistest.Start(t)})
	})
	t.Run("pipelined", func(t *testing.T) {
		t.Parallel()
		run(t, mount, backend{srv: redistest.Start(t), pipelined: true})
	})
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		run(t, mount, backend{mr: miniredis.RunT(t)})
	})
}

func run(t *testing.T, mount Mount, b backend) {
	runExactlyOnce(t, mount, b)
	runObserve(t, mount, b)
	runMemory(t, mount, b)
	runInterrupt(t, mount, b)
	runEdgeCases(t, mount, b)
	runRetention(t, mount, b)
	runDraft(t, mount, b)
	payment := `{"amount": 1200, "currency": "EUR", "customer": "cus_1"}`

	t.Run("first request runs; a retry replays status, body and headers", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{})
		key := newKey()
		first := e.do(req{key: key, body: payment})
		require.Equal(t, http.StatusCreated, first.status)
		require.False(t, first.replayed())
		require.NotEmpty(t, first.header.Get("Set-Cookie"))
		for range 3 {
			again := e.do(req{key: key, body: payment})
			require.Equal(t, http.StatusCreated, again.status)
			require.True(t, again.replayed())
			require.Equal(t, first.body, again.body)
			require.Equal(t, first.header.Get("Location"), again.header.Get("Location"))
			require.Equal(t, first.header.Get("Content-Type"), again.header.Get("Content-Type"))
			require.Equal(t, []string{"one", "two"}, again.header.Values("X-Multi"))
			require.Empty(t, again.header.Get("Set-Cookie"), "cookies are never replayed")
		}
		require.Equal(t, 1, e.app.runsOf(key))
	})

	t.Run("a retry while the first runs gets 409 with Retry-After", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{opts: httpmw.Options{RetryAfter: 1500 * time.Millisecond}})
		key := newKey()
		done := make(chan *response)
		go func() { done <- e.do(req{path: "/slow", key: key}) }()
		require.Equal(t, key, <-e.app.started)
		dup := e.do(req{path: "/slow", key: key})
		require.Equal(t, http.StatusConflict, dup.status)
		require.Equal(t, "2", dup.header.Get("Retry-After"), "1.5s rounds up to 2")
		require.Equal(t, "request-in-progress", dup.problemType(t))
		e.app.open()
		first := <-done
		require.Equal(t, http.StatusCreated, first.status)
		again := e.do(req{path: "/slow", key: key})
		require.True(t, again.replayed())
		require.Equal(t, first.body, again.body)
		require.Equal(t, 1, e.app.runsOf(key))
	})

	t.Run("the same key with another request gets 422 and runs nothing", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{})
		key := newKey()
		require.Equal(t, http.StatusCreated, e.do(req{key: key, body: payment}).status)
		for _, other := range []req{
			{key: key, body: `{"amount": 1201, "currency": "EUR", "customer": "cus_1"}`},
			{key: key, body: payment, path: "/payments?x=1"},
			{key: key, body: payment, method: http.MethodPut},
			{key: key, body: payment + " ", contentType: "text/plain"},
		} {
			r := e.do(other)
			require.Equal(t, http.StatusUnprocessableEntity, r.status)
			require.Equal(t, "key-reused", r.problemType(t))
		}
		require.Equal(t, 1, e.app.runsOf(key))
		require.True(t, e.do(req{key: key, body: payment}).replayed(), "the original still replays")
	})

	t.Run("reordered and re-indented JSON is the same request", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{})
		key := newKey()
		first := e.do(req{key: key, body: payment, path: "/payments?b=2&a=1"})
		require.Equal(t, http.StatusCreated, first.status)
		same := e.do(req{key: key, path: "/payments?a=1&b=2",
			body: "{\n  \"customer\": \"cus_1\",\n  \"currency\": \"EUR\",\n  \"amount\": 1200.0\n}\n", contentType: "application/json; charset=utf-8"})
		require.Equal(t, http.StatusCreated, same.status)
		require.True(t, same.replayed())
		require.Equal(t, first.body, same.body)
		require.Equal(t, 1, e.app.runsOf(key))
	})

	t.Run("missing key gets 400; with Optional the request runs unprotected", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{})
		before := e.keys()
		r := e.do(req{noKey: true, body: payment})
		require.Equal(t, http.StatusBadRequest, r.status)
		require.Equal(t, "key-missing", r.problemType(t))
		require.Zero(t, e.app.total.Load())
		e.requireNoNewKeys(t, before)

		opt := newEnv(t, b, mount, envConfig{opts: httpmw.Options{Optional: true}})
		require.Equal(t, http.StatusCreated, opt.do(req{noKey: true, body: payment}).status)
		require.Equal(t, http.StatusCreated, opt.do(req{noKey: true, body: payment}).status)
		require.EqualValues(t, 2, opt.app.total.Load())
	})

	t.Run("malformed keys get 400 and store nothing", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{})
		before := e.keys()
		for name, key := range map[string]string{
			"empty": "", "blank": "  ", "256 chars": strings.Repeat("k", 256), "control byte": "ab\x01cd",
			"newline": "ab\ncd", "non-ASCII": "clé-1", "space inside": "a b", "unterminated quote": `"abc`,
			"quote after": `"abc"x`, "bad escape": `"a\qb"`, "empty quoted": `""`, "NUL": "a\x00b",
			"header injection": "k1\r\nX-Injected: 1",
		} {
			hr := e.newRequest(req{body: payment, noKey: true})
			hr.Header["Idempotency-Key"] = []string{key}
			r := e.serve(hr)
			require.Equal(t, http.StatusBadRequest, r.status, name)
			require.Contains(t, []string{"key-malformed", "key-missing"}, r.problemType(t), name)
		}
		two := e.newRequest(req{body: payment, key: "a"})
		two.Header.Add("Idempotency-Key", "b")
		r := e.serve(two)
		require.Equal(t, http.StatusBadRequest, r.status)
		require.Equal(t, "key-malformed", r.problemType(t))
		require.Zero(t, e.app.total.Load())
		e.requireNoNewKeys(t, before)

		// The longest key, and an RFC 8941 string naming the same key as a bare token.
		long := strings.Repeat("k", 255)
		require.Equal(t, http.StatusCreated, e.do(req{key: long, body: payment}).status)
		key := newKey()
		require.False(t, e.do(req{key: `"` + key + `"`, body: payment}).replayed())
		require.True(t, e.do(req{key: key, body: payment}).replayed())
	})

	t.Run("a body over the limit gets 413 and stores nothing", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{opts: httpmw.Options{MaxBodyBytes: 1024}})
		before := e.keys()
		r := e.do(req{key: newKey(), body: `{"pad":"` + strings.Repeat("x", 2000) + `"}`})
		require.Equal(t, http.StatusRequestEntityTooLarge, r.status)
		require.Equal(t, "body-too-large", r.problemType(t))
		// Without Content-Length (chunked) too.
		hr := e.newRequest(req{key: newKey()})
		hr.Body = io.NopCloser(struct{ io.Reader }{strings.NewReader(strings.Repeat("y", 5000))})
		hr.ContentLength = -1
		resp, err := e.srv.Client().Do(hr)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
		require.Zero(t, e.app.total.Load())
		e.requireNoNewKeys(t, before)
	})

	t.Run("malformed JSON gets 400 before any claim", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{})
		before := e.keys()
		for _, body := range []string{`{"amount": 12`, `{"a":1,}`, `{'a':1}`, `{"a":1,"a":2}`, strings.Repeat("[", 10000)} {
			r := e.do(req{key: newKey(), body: body})
			require.Equal(t, http.StatusBadRequest, r.status, body)
			require.Equal(t, "json-malformed", r.problemType(t))
		}
		require.Zero(t, e.app.total.Load())
		e.requireNoNewKeys(t, before)
		// The same bytes sent as text are an ordinary request.
		require.Equal(t, http.StatusCreated, e.do(req{key: newKey(), body: `{"amount": 12`, contentType: "text/plain"}).status)
	})

	t.Run("two callers with the same key are two requests", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{})
		key := newKey()
		alice := e.do(req{key: key, body: payment, auth: "Bearer alice"})
		bob := e.do(req{key: key, body: payment, auth: "Bearer bob"})
		require.False(t, alice.replayed())
		require.False(t, bob.replayed())
		require.NotEqual(t, alice.body, bob.body)
		require.Equal(t, 2, e.app.runsOf(key))
		require.Equal(t, alice.body, e.do(req{key: key, body: payment, auth: "Bearer alice"}).body)
		require.Equal(t, bob.body, e.do(req{key: key, body: payment, auth: "Bearer bob"}).body)
		// A different body from bob is his business, not a mismatch with alice's.
		require.Equal(t, http.StatusUnprocessableEntity, e.do(req{key: key, body: `{"x":1}`, auth: "Bearer bob"}).status)

		// Derived keys differ between callers and stay put across retries.
		dk := newKey()
		da := e.do(req{path: "/derived", key: dk, auth: "Bearer alice"})
		db := e.do(req{path: "/derived", key: dk, auth: "Bearer bob"})
		require.Len(t, da.body, 32)
		require.NotEqual(t, da.body, db.body)
		require.NotContains(t, string(da.body), dk)
	})

	t.Run("5xx releases the key: the retry runs once more and is then replayed", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{})
		key := newKey()
		e.app.fails.Store(1)
		r := e.do(req{path: "/flaky", key: key})
		require.Equal(t, http.StatusServiceUnavailable, r.status)
		require.False(t, r.replayed())
		r = e.do(req{path: "/flaky", key: key})
		require.Equal(t, http.StatusCreated, r.status)
		require.False(t, r.replayed())
		r2 := e.do(req{path: "/flaky", key: key})
		require.True(t, r2.replayed())
		require.Equal(t, r.body, r2.body)
		require.Equal(t, 2, e.app.runsOf(key))
	})

	t.Run("statuses that mean try again are not stored", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{})
		for _, code := range []int{408, 409, 425, 429, 500, 502} {
			key := newKey()
			path := "/status/" + strconv.Itoa(code)
			require.Equal(t, code, e.do(req{path: path, key: key}).status)
			require.Equal(t, code, e.do(req{path: path, key: key}).status)
			require.Equal(t, 2, e.app.runsOf(key), "status %d", code)
		}
		for _, code := range []int{200, 202, 400, 402, 404, 422} {
			key := newKey()
			path := "/status/" + strconv.Itoa(code)
			first := e.do(req{path: path, key: key})
			require.Equal(t, code, first.status)
			again := e.do(req{path: path, key: key})
			require.Equal(t, code, again.status)
			require.True(t, again.replayed(), "status %d", code)
			require.Equal(t, first.body, again.body)
			require.Equal(t, 1, e.app.runsOf(key), "status %d", code)
		}
	})

	t.Run("a panicking handler releases the key", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{})
		key := newKey()
		require.PanicsWithValue(t, "handler crashed", func() { e.serve(e.newRequest(req{path: "/panic", key: key})) })
		first := e.serve(e.newRequest(req{path: "/panic", key: key}))
		require.Equal(t, http.StatusCreated, first.status)
		require.False(t, first.replayed())
		require.Empty(t, first.header.Get("X-Half"), "nothing of the crashed attempt leaks")
		again := e.serve(e.newRequest(req{path: "/panic", key: key}))
		require.True(t, again.replayed())
		require.Equal(t, first.body, again.body)
		require.Equal(t, 2, e.app.runsOf(key))
	})

	t.Run("redirects, empty bodies and large bodies replay faithfully", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{opts: httpmw.Options{MaxResponseBytes: 32 << 10}})
		noFollow := *e.srv.Client()
		noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		get := func(path, key string) *http.Response {
			hr := e.newRequest(req{path: path, key: key})
			resp, err := noFollow.Do(hr)
			require.NoError(t, err)
			resp.Body.Close()
			return resp
		}
		key := newKey()
		first, again := get("/redirect", key), get("/redirect", key)
		require.Equal(t, http.StatusSeeOther, first.StatusCode)
		require.Equal(t, http.StatusSeeOther, again.StatusCode)
		require.Equal(t, "/payments/pay_9", again.Header.Get("Location"))
		require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))

		key = newKey()
		nb := e.do(req{path: "/nobody", key: key})
		nb2 := e.do(req{path: "/nobody", key: key})
		require.Equal(t, http.StatusNoContent, nb2.status)
		require.True(t, nb2.replayed())
		require.Equal(t, "yes", nb2.header.Get("X-Done"))
		require.Empty(t, nb.body)
		require.Empty(t, nb2.body)

		// Over MaxResponseBytes: the first client gets it all, replays get the
		// status and a problem in place of the body; it never runs twice.
		key = newKey()
		big := e.do(req{path: "/big", key: key})
		require.Equal(t, http.StatusCreated, big.status)
		require.Equal(t, bytes.Repeat([]byte{0xAB}, 64<<10), big.body)
		big2 := e.do(req{path: "/big", key: key})
		require.Equal(t, http.StatusCreated, big2.status)
		require.True(t, big2.replayed())
		require.Equal(t, "response-too-large", big2.problemType(t))
		require.Equal(t, 1, e.app.runsOf(key))
	})

	t.Run("safe methods pass through", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{})
		key := newKey()
		for range 2 {
			r := e.do(req{method: http.MethodGet, path: "/status/200", key: key})
			require.Equal(t, http.StatusOK, r.status)
			require.False(t, r.replayed())
		}
		require.Equal(t, 2, e.app.runsOf(""), "unprotected requests have no key in context")
	})

	t.Run("100 concurrent duplicates run the handler once", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{})
		key := newKey()
		rs := burst(t, 100, func(i int) (*response, error) { return e.try(req{path: "/sleep?ms=50", key: key, body: payment}) })
		var original *response
		for _, r := range rs {
			if r.status == http.StatusCreated && !r.replayed() {
				require.Nil(t, original, "two originals")
				original = r
			}
		}
		require.NotNil(t, original)
		for _, r := range rs {
			switch {
			case r == original:
			case r.status == http.StatusConflict:
				require.Equal(t, "1", r.header.Get("Retry-After"))
				require.Equal(t, "request-in-progress", r.problemType(t))
			default:
				require.True(t, r.replayed(), "status %d", r.status)
				require.Equal(t, original.body, r.body)
			}
		}
		require.Equal(t, 1, e.app.runsOf(key))
	})

	t.Run("in wait mode 100 concurrent duplicates all get the answer", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{opts: httpmw.Options{Wait: 10 * time.Second}})
		key := newKey()
		rs := burst(t, 100, func(i int) (*response, error) { return e.try(req{path: "/sleep?ms=50", key: key, body: payment}) })
		originals := 0
		for _, r := range rs {
			require.Equal(t, http.StatusCreated, r.status)
			require.Equal(t, rs[0].body, r.body)
			if !r.replayed() {
				originals++
			}
		}
		require.Equal(t, 1, originals)
		require.Equal(t, 1, e.app.runsOf(key))
	})

	t.Run("two app instances on one Redis run the handler once", func(t *testing.T) {
		shared := newApp()
		cfg := envConfig{app: shared, opts: httpmw.Options{Wait: 10 * time.Second}}
		e1, e2 := newEnv(t, b, mount, cfg), newEnv(t, b, mount, cfg)
		key := newKey()
		rs := burst(t, 100, func(i int) (*response, error) {
			if i%2 == 0 {
				return e1.try(req{path: "/sleep?ms=50", key: key, body: payment})
			}
			return e2.try(req{path: "/sleep?ms=50", key: key, body: payment})
		})
		for _, r := range rs {
			require.Equal(t, http.StatusCreated, r.status)
			require.Equal(t, rs[0].body, r.body)
		}
		require.Equal(t, 1, shared.runsOf(key))
	})

	t.Run("a slow handler is never taken over while alive", func(t *testing.T) {
		const lease = 400 * time.Millisecond
		e := newEnv(t, b, mount, envConfig{store: redisstore.Options{Lease: lease}})
		key := newKey()
		done := make(chan *response)
		go func() { done <- e.do(req{path: "/slow", key: key}) }()
		<-e.app.started
		until := time.Now().Add(3*lease + lease/2)
		for n := 0; time.Now().Before(until) && n < 500; n++ {
			require.Equal(t, http.StatusConflict, e.do(req{path: "/slow", key: key}).status)
			time.Sleep(20 * time.Millisecond)
		}
		e.app.open()
		require.Equal(t, http.StatusCreated, (<-done).status)
		require.Equal(t, 1, e.app.runsOf(key))
	})

	t.Run("a dead instance's request is taken over after the lease and resumes", func(t *testing.T) {
		const lease = 300 * time.Millisecond
		shared := newApp()
		fc := &faultyClient{Scripter: b.scripter(t)}
		dying := newEnv(t, b, mount, envConfig{store: redisstore.Options{Lease: lease}, client: fc, app: shared})
		alive := newEnv(t, b, mount, envConfig{store: redisstore.Options{Lease: lease}, app: shared})
		key := newKey()
		go func() { dying.do(req{path: "/checkpoint", key: key}) }()
		require.Equal(t, key, <-shared.started) // charged and checkpointed
		fc.kill()                               // its heartbeat and its complete never reach Redis again

		require.Equal(t, http.StatusConflict, alive.do(req{path: "/checkpoint", key: key}).status)
		if b.mr != nil {
			b.mr.FastForward(lease) // miniredis ages TTLs only when told
		}
		var taken *response
		require.Eventually(t, func() bool {
			taken = alive.do(req{path: "/checkpoint", key: key})
			return taken.status != http.StatusConflict
		}, 10*time.Second, 20*time.Millisecond)
		require.Equal(t, http.StatusCreated, taken.status)
		require.Equal(t, "paid, charge ch_"+key+" (resumed true)", string(taken.body))
		shared.open() // the dead instance's handler finishes; its writes are lost
		again := alive.do(req{path: "/checkpoint", key: key})
		require.True(t, again.replayed())
		require.Equal(t, taken.body, again.body)
		require.Equal(t, 1, shared.chargesOf(key), "charged once across both instances")
	})

	t.Run("a run overtaken after its lease ran out does not answer its own response: the key keeps one answer", func(t *testing.T) {
		const lease = 300 * time.Millisecond
		shared := newApp()
		fc := &faultyClient{Scripter: b.scripter(t)}
		stalled := newEnv(t, b, mount, envConfig{store: redisstore.Options{Lease: lease}, client: fc, app: shared})
		alive := newEnv(t, b, mount, envConfig{store: redisstore.Options{Lease: lease}, app: shared})
		key := newKey()
		first := stalled.start(req{path: "/slow", key: key})
		require.Equal(t, key, <-shared.started)
		fc.kill() // a stall: no heartbeat reaches Redis, the lease runs out
		if b.mr != nil {
			b.mr.FastForward(lease)
		}
		// The retry takes the key over as attempt 2 once the lease is out
		// (a 409 until then), and runs.
		var second <-chan *response
		for i := 0; i < 500 && second == nil; i++ {
			c := alive.start(req{path: "/slow", key: key})
			select {
			case r := <-c:
				require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
				time.Sleep(20 * time.Millisecond)
			case got := <-shared.started:
				require.Equal(t, key, got)
				second = c
			}
		}
		require.NotNil(t, second, "the lease never ran out")
		fc.revive()   // the stalled instance wakes up
		shared.open() // both runs answer; the stalled one's completion is refused
		took, stale := <-second, <-first
		require.Equal(t, http.StatusCreated, took.status, "%s", took.body)
		again := alive.do(req{path: "/slow", key: key})
		require.True(t, again.replayed())
		require.Equal(t, took.body, again.body, "the key's answer is the takeover's")
		require.NotEqual(t, http.StatusCreated, stale.status,
			"the overtaken run sent its own answer (%q) while the key answers %q: two final answers for one key", stale.body, took.body)
		require.Equal(t, http.StatusConflict, stale.status, "%s", stale.body)
		require.Equal(t, "request-in-progress", stale.problemType(t))
		require.NotEmpty(t, stale.header.Get("Retry-After"))
	})

	if b.srv == nil {
		return
	}

	t.Run("Redis down: 503 with Retry-After within the timeout, then recovery", func(t *testing.T) {
		srv := redistest.Start(t)
		fb := b.on(srv)
		const timeout = 500 * time.Millisecond
		e := newEnv(t, fb, mount, envConfig{opts: httpmw.Options{Timeout: timeout}})
		require.Equal(t, http.StatusCreated, e.do(req{key: newKey(), body: payment}).status)

		srv.Kill()
		start := time.Now()
		r := e.do(req{key: newKey(), body: payment})
		// The bound is the behaviour: Timeout ends a request whose
		// store is down (the client's dial retries would take longer).
		// 4x what a loaded race build takes: Timeout and a second.
		require.Less(t, time.Since(start), 4*(timeout+time.Second))
		require.Equal(t, http.StatusServiceUnavailable, r.status)
		require.Equal(t, "1", r.header.Get("Retry-After"))
		require.Equal(t, "store-unavailable", r.problemType(t))
		require.EqualValues(t, 1, e.app.total.Load(), "the handler did not run")

		srv.Pause() // not running: Pause does nothing; Restart brings it back empty
		srv.Restart(t)
		require.Eventually(t, func() bool {
			return e.do(req{key: newKey(), body: payment}).status == http.StatusCreated
		}, 10*time.Second, 50*time.Millisecond)
	})

	t.Run("Redis hung: 503 within the timeout", func(t *testing.T) {
		srv := redistest.Start(t)
		const timeout = 300 * time.Millisecond
		e := newEnv(t, b.on(srv), mount, envConfig{opts: httpmw.Options{Timeout: timeout}})
		require.Equal(t, http.StatusCreated, e.do(req{key: newKey(), body: payment}).status)
		srv.Pause()
		defer srv.Resume()
		start := time.Now()
		r := e.do(req{key: newKey(), body: payment})
		// The bound is the behaviour: Timeout ends a request whose
		// store hangs (it would hang until Resume). 4x what a loaded
		// race build takes: Timeout and a second.
		require.Less(t, time.Since(start), 4*(timeout+time.Second))
		require.Equal(t, http.StatusServiceUnavailable, r.status)
	})

	t.Run("FailOpen runs the handler unprotected while Redis is down", func(t *testing.T) {
		srv := redistest.Start(t)
		e := newEnv(t, b.on(srv), mount, envConfig{opts: httpmw.Options{FailOpen: true, Timeout: 300 * time.Millisecond}})
		srv.Kill()
		key := newKey()
		r := e.do(req{key: key, body: payment})
		require.Equal(t, http.StatusCreated, r.status)
		require.Contains(t, string(r.body), `"amount": 1200`, "the handler read the body")
		require.Equal(t, 1, e.app.runsOf(key), "run unprotected, with its key")
	})
}

// burst runs n requests at once and returns their responses; a request that
// fails is reported from the test goroutine.
func burst(t *testing.T, n int, do func(i int) (*response, error)) []*response {
	t.Helper()
	rs := make([]*response, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			rs[i], errs[i] = do(i)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "request %d", i)
	}
	return rs
}

// faultyClient is a Redis client that can be cut off, as if its process died.
type faultyClient struct {
	redis.Scripter
	mu   sync.Mutex
	dead bool
}

var errDead = errors.New("connection lost (test)")

func (f *faultyClient) kill() {
	f.mu.Lock()
	f.dead = true
	f.mu.Unlock()
}

func (f *faultyClient) revive() {
	f.mu.Lock()
	f.dead = false
	f.mu.Unlock()
}

func (f *faultyClient) check(ctx context.Context) *redis.Cmd {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.dead {
		return nil
	}
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(errDead)
	return cmd
}

func (f *faultyClient) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	if c := f.check(ctx); c != nil {
		return c
	}
	return f.Scripter.Eval(ctx, script, keys, args...)
}

func (f *faultyClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if c := f.check(ctx); c != nil {
		return c
	}
	return f.Scripter.EvalSha(ctx, sha, keys, args...)
}
