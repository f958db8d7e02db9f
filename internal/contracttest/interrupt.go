package contracttest

// Regression tests for runs cut off before they answered: a run cut off
// (Shutdown, MaxDuration, a lease lost by its own clock) may have done its
// side effect, so its record is kept and the retry takes it over as the
// next attempt. Each failed on the middleware before its fix (the key was
// released and the retry ran as a fresh attempt 1).

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/redisstore"
)

func runInterrupt(t *testing.T, mount Mount, b backend) {
	quiet := slog.New(slog.DiscardHandler)
	const payment = `{"amount": 1200, "currency": "EUR", "customer": "cus_1"}`

	// cutOff sends a request to /cutoff on e, runs stop once the handler
	// has charged, and checks that the handler was cut off with cause and
	// answered 503; then that the retry, on another instance (next), takes
	// the key over as attempt 2 instead of charging again. cut runs once the
	// handler saw its context end.
	cutOff := func(t *testing.T, e, next *env, stop func(), cause error, cut func()) {
		t.Helper()
		key := newKey()
		done := e.start(req{path: "/cutoff", key: key})
		require.Equal(t, key, <-e.app.started)
		stop()
		require.ErrorIs(t, <-e.app.causes, cause)
		cut()
		first := <-done
		require.Equal(t, http.StatusServiceUnavailable, first.status, "%s", first.body)
		e.app.open() // a fresh first attempt would now finish, and charge again
		if b.mr != nil {
			b.mr.FastForward(time.Minute) // whatever is left of the lease
		}

		retry := next.do(req{path: "/cutoff", key: key})
		require.Equal(t, []int{1, 2}, e.app.attemptsOf(key), "the retry ran as a fresh first attempt: the cut-off run was forgotten")
		require.Equal(t, http.StatusCreated, retry.status, "%s", retry.body)
		require.Equal(t, "finished by attempt 2", string(retry.body))
		again := next.do(req{path: "/cutoff", key: key})
		require.True(t, again.replayed())
		require.Equal(t, 1, e.app.chargesOf(key))
	}
	// instances returns two instances of one app on one Redis: the first
	// with store and opts, the other with the defaults.
	instances := func(t *testing.T, cfg envConfig) (*env, *env) {
		cfg.app = newApp()
		e := newEnv(t, b, mount, cfg)
		return e, newEnv(t, b, mount, envConfig{app: cfg.app, opts: httpmw.Options{Logger: quiet}})
	}

	t.Run("a run cut off by Shutdown is taken over by its retry as attempt 2", func(t *testing.T) {
		shutdown, stop := context.WithCancel(context.Background())
		defer stop()
		e, next := instances(t, envConfig{opts: httpmw.Options{Shutdown: shutdown, ShutdownGrace: 100 * time.Millisecond, Logger: quiet}})
		start := time.Now()
		cutOff(t, e, next, stop, httpmw.ErrShutdown, func() {
			require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "cancelled before the grace ended")
		})
	})

	t.Run("on Shutdown a running handler gets ShutdownGrace to finish, and new requests are refused", func(t *testing.T) {
		shutdown, stop := context.WithCancel(context.Background())
		defer stop()
		e, next := instances(t, envConfig{opts: httpmw.Options{Shutdown: shutdown, ShutdownGrace: time.Minute, Logger: quiet}})
		key := newKey()
		done := e.start(req{path: "/cutoff", key: key})
		require.Equal(t, key, <-e.app.started)
		stop()

		// During the grace a new request is refused before anything is
		// claimed: its retry goes to another instance.
		other := newKey()
		refused := e.do(req{key: other, body: payment})
		require.Equal(t, http.StatusServiceUnavailable, refused.status, "%s", refused.body)
		require.Equal(t, "shutting-down", refused.problemType(t))
		require.Equal(t, "1", refused.header.Get("Retry-After"))
		require.Zero(t, e.app.runsOf(other))
		require.Equal(t, http.StatusCreated, next.do(req{key: other, body: payment}).status, "nothing was claimed")

		e.app.open() // the running handler finishes within the grace
		first := <-done
		require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
		require.Equal(t, "finished by attempt 1", string(first.body))
		require.Empty(t, e.app.causes, "the handler was cancelled")
		again := next.do(req{path: "/cutoff", key: key})
		require.True(t, again.replayed(), "the outcome was stored")
		require.Equal(t, first.body, again.body)
	})

	t.Run("a run cut off by MaxDuration is taken over by its retry as attempt 2", func(t *testing.T) {
		e, next := instances(t, envConfig{store: redisstore.Options{MaxDuration: 200 * time.Millisecond}, opts: httpmw.Options{Logger: quiet}})
		cutOff(t, e, next, func() {}, redisstore.ErrMaxDuration, func() {})
	})

	t.Run("a run that fenced itself (no heartbeat reached Redis) is taken over by its retry as attempt 2", func(t *testing.T) {
		fc := &faultyClient{Scripter: b.scripter(t)}
		e, next := instances(t, envConfig{store: redisstore.Options{Lease: 300 * time.Millisecond}, client: fc, opts: httpmw.Options{Logger: quiet}})
		// No beat gets through: the owner cuts itself off when its lease
		// runs out by its own clock; then Redis is back while the middleware
		// ends the run.
		cutOff(t, e, next, fc.kill, redisstore.ErrLeaseLost, fc.revive)
	})
}

// start sends r from another goroutine; the channel gets its response (a
// failure as a response with status 0 and the error as its body).
func (e *env) start(r req) <-chan *response {
	done := make(chan *response, 1)
	go func() {
		resp, err := e.try(r)
		if err != nil {
			resp = &response{body: []byte(err.Error())}
		}
		done <- resp
	}()
	return done
}
