package storm

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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

// The servers below are the verdict's hard cases: three that used to pass
// although a retry could run them again, and two correct ones that used to
// fail.

// arrivals counts the requests per key and lets a handler wait until a
// key's duplicates have all arrived, so that the storm's overlap is certain
// rather than likely.
type arrivals struct {
	want int
	mu   sync.Mutex
	n    map[string]int
	all  map[string]chan struct{}
}

func newArrivals(want int) *arrivals {
	return &arrivals{want: want, n: map[string]int{}, all: map[string]chan struct{}{}}
}

// arrive records a request for key and returns its ordinal (1 for the
// first) and a channel closed once want requests for key have arrived.
func (a *arrivals) arrive(key string) (int, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ch, ok := a.all[key]
	if !ok {
		ch = make(chan struct{})
		a.all[key] = ch
	}
	a.n[key]++
	if a.n[key] == a.want {
		close(ch)
	}
	return a.n[key], ch
}

// waitAll waits for ch, at most 10s, so a broken storm cannot hang a test.
func waitAll(ch <-chan struct{}) {
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
	}
}

// keyLock is the per-key lock of the servers below: the first request for
// a key holds it until all of the key's duplicates have arrived, so every
// other duplicate finds it held.
type keyLock struct {
	arr     *arrivals
	mu      sync.Mutex
	running map[string]bool
}

func newKeyLock(dups int) *keyLock {
	return &keyLock{arr: newArrivals(dups), running: map[string]bool{}}
}

// enter reports whether another request holds key's lock. If not, the
// caller holds it, once all the key's duplicates have arrived, and must
// call leave.
func (l *keyLock) enter(key string) (busy bool) {
	l.mu.Lock()
	busy = l.running[key]
	if !busy {
		l.running[key] = true
	}
	l.mu.Unlock()
	// The arrival counts only after the lock was checked, so the holder
	// cannot let go before every duplicate has found it held.
	_, all := l.arr.arrive(key)
	if !busy {
		waitAll(all)
	}
	return busy
}

func (l *keyLock) leave(key string) {
	l.mu.Lock()
	delete(l.running, key)
	l.mu.Unlock()
}

// A server without idempotency whose duplicates end in 500: every request
// charges, then a unique constraint on the key fails for all but the first.
// A 5xx is never an execution (idemkey releases a key on one, and the retry
// runs it), so the answers alone cannot show these charges: the late
// probe's 500 leaves every key without a proof (inconclusive, never a
// pass), and a count catches the server running them again.
func TestFalsePassChargesThenUniqueConstraint(t *testing.T) {
	const keys, dups = 5, 4
	var charges atomic.Int64
	var mu sync.Mutex
	inserted := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stats" {
			fmt.Fprintf(w, `{"charges": %d}`, charges.Load())
			return
		}
		charges.Add(1)
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		dup := inserted[key]
		inserted[key] = true
		mu.Unlock()
		if dup {
			http.Error(w, "duplicate key value violates unique constraint", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"pay_1"}`)
	}))
	t.Cleanup(srv.Close)

	args := []string{"--url", srv.URL, "--keys", fmt.Sprint(keys), "--dups", fmt.Sprint(dups), "--concurrency", "8"}
	code, j, stderr := runJSON(t, args...)
	require.Equal(t, 1, code, stderr)
	require.Equal(t, "inconclusive", j.Verdict, "the answers cannot tell, and must not pass")
	require.Zero(t, j.KeysPassed)
	require.Equal(t, keys, j.Probe.NotFinal, "the probe's 500 is no final answer")
	require.Len(t, j.Inconclusive, keys)
	for _, f := range j.Inconclusive {
		require.Equal(t, RuleNoLostSuccess, f.Rule)
		require.Equal(t, map[string]int{"201": 1, "500": dups - 1}, f.Statuses)
	}
	require.Equal(t, int64(keys*(dups+1)), charges.Load(), "every attempt charged, the probe's too")

	code, j, stderr = runJSON(t, append(args, "--count-url", srv.URL+"/stats", "--count-field", "charges")...)
	require.Equal(t, 1, code, stderr)
	require.Equal(t, "fail", j.Verdict, "the count catches what the 5xx hid")
	require.Equal(t, int64(keys*(dups+1)), *j.Count.Delta)
}

// A lock-only server: 409 while the first request for a key runs, and
// nothing stored afterwards, so the next retry runs again.
func TestFalsePassLockOnly(t *testing.T) {
	const keys, dups = 4, 5
	lock := newKeyLock(dups)
	var executions atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if lock.enter(key) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "in progress", http.StatusConflict)
			return
		}
		n := executions.Add(1)
		lock.leave(key) // and nothing stored
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"pay_%d"}`, n)
	}))
	t.Cleanup(srv.Close)

	code, j, stderr := runJSON(t, "--url", srv.URL, "--keys", fmt.Sprint(keys), "--dups", fmt.Sprint(dups), "--concurrency", "8")
	require.Equal(t, 1, code, stderr)
	require.Equal(t, "fail", j.Verdict)
	require.Equal(t, keys, j.KeysFailed)
	require.Equal(t, keys*(dups-1), j.InProgress)
	for _, f := range j.Failures {
		require.Contains(t, f.Reason, "late probe")
		require.Equal(t, "201 not replayed", f.Probe)
		require.Equal(t, map[string]int{"201": 1, "409": dups - 1}, f.Statuses)
	}
	require.Equal(t, keys, j.Probe.Executed)

	code, stdout, _ := runCommand(t, "--url", srv.URL, "--keys", "1", "--dups", fmt.Sprint(dups))
	require.Equal(t, 1, code)
	require.Contains(t, stdout, "failed keys (showing 1 of 1):")
	require.Contains(t, stdout, "executed 2 times (201 x2 without Idempotent-Replayed: true), the late probe included\n")
	require.Contains(t, stdout, fmt.Sprintf("      got 201 x1, 409 x%d; late probe: 201 not replayed\n", dups-1))
	require.Contains(t, stdout, "verdict: FAIL (1 of 1 keys failed)")
}

// A server that answers nothing but 503.
func TestFalsePassOnly503(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)

	code, j, stderr := runJSON(t, "--url", srv.URL, "--keys", "3", "--dups", "4", "--concurrency", "8")
	require.Equal(t, 1, code, stderr)
	require.Equal(t, "inconclusive", j.Verdict)
	require.Zero(t, j.KeysPassed)
	require.Zero(t, j.KeysFailed)
	require.Equal(t, 3, j.KeysInconclusive)
	require.Equal(t, map[string]int{"503": 12}, j.StatusCounts)
	require.Equal(t, 12, j.RetryLater)
	require.Zero(t, j.Probe.Sent, "nothing to compare a probe with")

	code, stdout, _ := runCommand(t, "--url", srv.URL, "--keys", "2", "--dups", "3")
	require.Equal(t, 1, code)
	require.Contains(t, stdout, "inconclusive keys (showing 2 of 2):")
	require.Contains(t, stdout, "  [liveness] no final answer: 3 attempts: 503 retry later, 503 retry later, 503 retry later\n      got 503 x3\n")
	require.Contains(t, stdout, "verdict: INCONCLUSIVE (2 of 2 keys inconclusive)")
}

// A correct server behind a per-key concurrency limiter: while a key's
// first request runs, its duplicates get 429, 408 or 425 instead of 409.
// idemkey's middleware releases exactly these statuses.
func TestFalseFailTryLaterStatuses(t *testing.T) {
	for _, status := range []int{http.StatusTooManyRequests, http.StatusRequestTimeout, http.StatusTooEarly} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			const keys, dups = 4, 5
			srv, fake := newLimitedServer(t, dups, status)
			code, j, stderr := runJSON(t, "--url", srv.URL, "--keys", fmt.Sprint(keys), "--dups", fmt.Sprint(dups), "--concurrency", "8")
			require.Equal(t, 0, code, stderr)
			require.Equal(t, "pass", j.Verdict)
			require.Equal(t, keys, j.KeysPassed)
			require.Equal(t, keys, j.Originals)
			require.Equal(t, keys, fake.Executions())
			require.Equal(t, keys*(dups-1), j.StatusCounts[fmt.Sprint(status)])
		})
	}
}

// newLimitedServer is idempotentServer behind a limiter that answers
// status to a key's duplicates while its first request runs; the first
// request runs until all dups have arrived.
func newLimitedServer(t *testing.T, dups, status int) (*httptest.Server, *idempotentServer) {
	t.Helper()
	fake := &idempotentServer{entries: map[string]*entry{}}
	lock := newKeyLock(dups)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if lock.enter(key) {
			w.Header().Set("Retry-After", "0.01")
			http.Error(w, "slow down", status)
			return
		}
		defer lock.leave(key)
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, fake
}

// newMiddlewareServer serves handler behind the real httpmw middleware on
// miniredis, with every caller in one scope unless opts says otherwise;
// wrap, if set, wraps the middleware.
func newMiddlewareServer(t *testing.T, opts httpmw.Options, handler http.Handler, wrap ...func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, redisstore.Options{})
	require.NoError(t, err)
	if opts.Scope == nil {
		opts.Scope = func(*http.Request) (string, error) { return "storm-test", nil }
	}
	h := httpmw.New(store, opts)(handler)
	for _, w := range wrap {
		h = w(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// A correct server whose response is over MaxResponseBytes: its replays
// carry the documented response-too-large problem with the original status.
func TestFalseFailOversizeResponse(t *testing.T) {
	const keys, dups = 4, 5
	var executions atomic.Int64
	big := strings.Repeat("x", 4096)
	srv := newMiddlewareServer(t, httpmw.Options{MaxResponseBytes: 1024, Wait: 10 * time.Second},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := executions.Add(1)
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "%d %s", n, big)
		}))

	code, j, stderr := runJSON(t, "--url", srv.URL, "--keys", fmt.Sprint(keys), "--dups", fmt.Sprint(dups), "--concurrency", "8")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "pass", j.Verdict, "%+v", j.Failures)
	require.Equal(t, keys, j.KeysPassed)
	require.Equal(t, keys, j.Originals)
	require.Equal(t, keys*(dups-1), j.Replays)
	require.Equal(t, int64(keys), executions.Load())
}

// Replays without an original: a server that answers every request of a
// fresh key as a replay never ran any of them for this storm, yet the
// storm used to pass it without a side-effect count. A replay without an
// original is explained only by an original whose answer was lost (a
// timeout or a transport error); with none lost, the key is inconclusive.
func TestReplaysWithoutAnOriginalAreInconclusive(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"pay_cached"}`)
	}))
	t.Cleanup(srv.Close)

	code, j, stderr := runJSON(t, "--url", srv.URL, "--keys", "4", "--dups", "3")
	require.Equal(t, 1, code, stderr)
	require.Equal(t, "inconclusive", j.Verdict)
	require.Zero(t, j.Originals)
	require.Equal(t, 4, j.KeysInconclusive)
	for _, k := range j.Inconclusive {
		require.Contains(t, k.Reason, "replayed, never executed")
	}
}
