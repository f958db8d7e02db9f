package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/redisstore"
)

// noPanic runs f and fails the test, rather than crash it, if f panics.
func noPanic[T any](t *testing.T, f func() (T, error)) (res T, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("panicked: %v", p)
		}
	}()
	return f()
}

// waitLeaseOut waits until the lease of req's record has run out.
func waitLeaseOut(t *testing.T, s *redisstore.Store, req redisstore.Request) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		rec, err := s.Lookup(context.Background(), req.Scope, req.Key)
		require.NoError(t, err)
		if rec.LeaseTTL == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "the lease did not run out within 20s")
		time.Sleep(10 * time.Millisecond)
	}
}

// Regression: an Observer that panics made Store.Do panic
// after its claim, leaving the key held (and its function never run) until
// the lease ran out, on every call. Now Do runs, stores and replays as if
// nobody observed, and a takeover ends its lease.
func TestPanickingObserverCannotBreakDo(t *testing.T) {
	srv := redistest.Start(t)
	var panics atomic.Int64
	boom := func() { panics.Add(1); panic("observer: boom") }
	obs := observe.Func{OnEvent: func(context.Context, *observe.Event) { boom() },
		OnRedis: func(context.Context, *observe.Call) { boom() }}
	s, err := redisstore.New(srv.Client(t), redisstore.Options{Observer: obs})
	require.NoError(t, err)
	ctx := context.Background()
	var runs atomic.Int64
	fn := func(context.Context, *redisstore.Lease) ([]byte, error) {
		runs.Add(1)
		return []byte("sent"), nil
	}
	req := redisstore.Request{Scope: "jobs", Key: fmt.Sprintf("k-%d", time.Now().UnixNano()), Label: "send"}
	for i := range 3 {
		res, err := noPanic(t, func() (*redisstore.Result, error) { return s.Do(ctx, req, fn) })
		require.NoError(t, err)
		require.Equal(t, "sent", string(res.Data))
		require.Equal(t, i > 0, res.Replayed)
	}
	require.EqualValues(t, 1, runs.Load())

	// A takeover of a claim whose owner never came back.
	req.Key += "-takeover"
	short, err := redisstore.New(srv.Client(t), redisstore.Options{Lease: 200 * time.Millisecond})
	require.NoError(t, err)
	_, err = short.Claim(ctx, req)
	require.NoError(t, err)
	waitLeaseOut(t, short, req)
	res, err := noPanic(t, func() (*redisstore.Result, error) { return s.Do(ctx, req, fn) })
	require.NoError(t, err)
	require.False(t, res.Replayed)
	rec, err := s.Lookup(ctx, req.Scope, req.Key)
	require.NoError(t, err)
	require.Equal(t, redisstore.Completed, rec.State)
	require.EqualValues(t, 2, runs.Load())
	require.Positive(t, panics.Load())

	// A panicking observer on Claim and on a lease's own calls.
	req.Key += "-direct"
	c, err := noPanic(t, func() (*redisstore.Claim, error) { return s.Claim(ctx, req) })
	require.NoError(t, err)
	_, err = noPanic(t, func() (struct{}, error) {
		return struct{}{}, c.Lease.Complete(ctx, redisstore.Response{Code: 0, Body: []byte("x")})
	})
	require.NoError(t, err)
}

// Regression: Do announced its claim (Claimed) before the
// heartbeat started, so an observer that blocked for longer than the lease
// let another process take the key over while the first run was still to
// come: two runs. Now the heartbeat runs while the observer blocks.
func TestBlockingObserverKeepsTheLease(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 300 * time.Millisecond
	other, err := redisstore.New(srv.Client(t), redisstore.Options{Lease: lease})
	require.NoError(t, err)
	req := redisstore.Request{Scope: "jobs", Key: fmt.Sprintf("block-%d", time.Now().UnixNano())}
	ctx := context.Background()
	var runs atomic.Int64
	fn := func(context.Context, *redisstore.Lease) ([]byte, error) {
		runs.Add(1)
		return []byte("sent"), nil
	}
	// While the first run's observer blocks on Claimed, another process
	// tries the key for three leases.
	var duplicate error
	obs := observe.Func{OnEvent: func(_ context.Context, e *observe.Event) {
		if e.Kind != observe.Claimed {
			return
		}
		deadline := time.Now().Add(3 * lease)
		for time.Now().Before(deadline) {
			if _, duplicate = other.Do(ctx, req, fn); duplicate == nil {
				return
			}
			time.Sleep(lease / 10)
		}
	}}
	s, err := redisstore.New(srv.Client(t), redisstore.Options{Lease: lease, Observer: obs})
	require.NoError(t, err)
	res, err := s.Do(ctx, req, fn)
	require.NoError(t, err)
	require.False(t, res.Replayed)
	require.True(t, errors.Is(duplicate, redisstore.ErrInProgress), "the duplicate: %v", duplicate)
	require.EqualValues(t, 1, runs.Load())
}
