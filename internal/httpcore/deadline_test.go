package httpcore

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/skew"
	"github.com/idemkey/idemkey/redisstore"
)

// TestClock: a call's Done closes after its deadline, never before, and
// less than a tick after; calls within one tick share a channel; every
// tick opened is closed. On synctest's clock, so that the lateness is the
// clock's own, not the machine's.
func TestClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := newClock(60 * time.Millisecond) // ticks of 1ms
		require.Equal(t, time.Millisecond, k.tick)

		var wg sync.WaitGroup
		late := make(chan time.Duration, 400)
		for g := range 8 {
			wg.Go(func() {
				for i := range 50 {
					c := &callCtx{}
					c.init(context.Background(), k)
					dl, ok := c.Deadline()
					require.True(t, ok)
					require.NoError(t, c.Err(), "not done before its deadline")
					if (g+i)%10 == 0 { // some wait for theirs
						<-c.Done()
						now := time.Now()
						require.False(t, now.Before(dl), "Done closed %v before the deadline", dl.Sub(now))
						require.ErrorIs(t, c.Err(), context.DeadlineExceeded)
						late <- now.Sub(dl)
					}
					time.Sleep(100 * time.Microsecond)
				}
			})
		}
		wg.Wait()
		close(late)
		n := 0
		for d := range late {
			n++
			require.Less(t, d, k.tick, "closed a tick or more after the deadline")
		}
		require.Equal(t, 40, n)

		// Calls in one tick share one channel.
		now := time.Now()
		_, a := k.at(now)
		_, b := k.at(now)
		require.Equal(t, a, b)

		// Every tick closes: nothing is left open once the last deadline
		// has passed.
		time.Sleep(k.d + k.tick)
		synctest.Wait()
		k.mu.Lock()
		defer k.mu.Unlock()
		require.Empty(t, k.open, "ticks never closed")
	})
}

// TestClockOutOfOrder: a call whose deadline comes before the latest
// tick handed out (it took its start time, then lost the CPU) gets a tick
// of its own, not the later one, which closes first; neither closes
// before its deadline (synctest's clock).
func TestClockOutOfOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := newClock(time.Second) // ticks of 3.9ms
		now := time.Now()
		dlLate, late := k.at(now.Add(50 * time.Millisecond))
		dlEarly, early := k.at(now)
		require.NotEqual(t, late, early)
		<-early
		require.False(t, time.Now().Before(dlEarly))
		select {
		case <-late:
			t.Fatal("the later tick closed with the earlier")
		default:
		}
		<-late
		require.False(t, time.Now().Before(dlLate), "the later tick closed early")
	})
}

// TestCallCtxValues: a call's context has its parent's values and none of
// its cancellation.
func TestCallCtxValues(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), key{}, "v"))
	c := &callCtx{}
	c.init(parent, newClock(time.Minute))
	cancel(ErrShutdown)
	require.Equal(t, "v", c.Value(key{}))
	require.NoError(t, c.Err())
	require.NoError(t, context.Cause(c))
	// A context derived from it is cancelled at its deadline, or with it.
	d, stop := context.WithCancel(c)
	stop()
	require.ErrorIs(t, d.Err(), context.Canceled)

	// Past its deadline, its cause is the deadline, not its parent's
	// (a live cancelCtx, as a server's request context is): the store's
	// runner returns context.Cause of a call it gave up on.
	live, stopLive := context.WithCancel(context.Background())
	defer stopLive()
	e := &callCtx{}
	e.init(live, newClock(10*time.Millisecond))
	select {
	case <-e.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done never closed")
	}
	require.ErrorIs(t, context.Cause(e), context.DeadlineExceeded)
}

// TestRunning: the cutoff cancels the exchanges still linked, with cause
// ErrShutdown, and every one added after it; none once removed.
func TestRunning(t *testing.T) {
	var s running
	type run struct {
		x   *Exchange
		ctx context.Context
	}
	start := func() run {
		ctx, cancel := context.WithCancelCause(context.Background())
		x := &Exchange{cancel: cancel}
		s.add(x, cancel)
		return run{x, ctx}
	}
	a, b, c := start(), start(), start()
	s.remove(b.x)
	s.remove(b.x) // twice: harmless
	s.cutAll()
	require.ErrorIs(t, context.Cause(a.ctx), ErrShutdown)
	require.NoError(t, b.ctx.Err(), "a finished run is not cancelled")
	require.ErrorIs(t, context.Cause(c.ctx), ErrShutdown)
	s.remove(a.x)
	s.remove(c.x)
	require.Nil(t, s.head)
	d := start()
	require.ErrorIs(t, context.Cause(d.ctx), ErrShutdown, "a run starting after the cutoff is cut at once")
	require.Nil(t, s.head)
}

// TestLabel: the label is the method and the path, cut to MaxFieldLen,
// whether it comes from the kept one or not.
func TestLabel(t *testing.T) {
	h := &Guard{}
	req := func(method, path string) *http.Request {
		return &http.Request{Method: method, URL: &url.URL{Path: path}}
	}
	long := "/" + strings.Repeat("p", 2000)
	for range 3 {
		for _, c := range []struct{ method, path string }{
			{"POST", "/v1/payments"}, {"POST", "/v1/payments"}, {"PATCH", "/v1/payments"}, {"POST", "/v1/payments/1"},
			{"POST", long}, {"POST", long}, {"PO", "ST /v1/payments"},
		} {
			want := c.method + " " + c.path
			if len(want) > redisstore.MaxFieldLen {
				want = want[:redisstore.MaxFieldLen]
			}
			require.Equal(t, want, h.label(req(c.method, c.path)))
		}
	}
	for i := range 200 { // varying paths
		p := "/v1/things/" + strconv.Itoa(i)
		require.Equal(t, "PATCH "+p, h.label(req("PATCH", p)))
	}
	h.lastLabel.Store(&labelEntry{"POST", "/v1/payments", "POST /v1/payments"})
	r := req("POST", "/v1/payments")
	require.Zero(t, testing.AllocsPerRun(100, func() { h.label(r) }), "the kept label costs nothing")
}

// TestClockStep: a call's deadline is a distance on the monotonic clock,
// so a step of the system clock between the call's start and its tick
// neither holds Done open for the length of the step (a claim waiting an
// hour on a pool's connection) nor closes it at once.
func TestClockStep(t *testing.T) {
	const d = 50 * time.Millisecond
	for _, step := range []time.Duration{time.Hour, -time.Hour} {
		k := newClock(d)
		start := time.Now()
		_, done := k.at(skew.Wall(start, step)) // started just before the clock stepped by -step
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("clock stepped by %v: Done not closed 10s after a deadline of %v", -step, d)
		}
		if since := time.Since(start); since < d {
			t.Errorf("clock stepped by %v: Done closed after %v, before the deadline (%v)", -step, since, d)
		}
	}
}
