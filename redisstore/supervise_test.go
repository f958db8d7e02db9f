package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSuperviseMany: the store keeps every supervised lease's beats on one
// timer. Many leases held for several leases' time all stay theirs (a
// retry gets 409, the owner completes), a lease supervised twice is kept
// by either watch alone, and nothing is left queued once they stop.
func TestSuperviseMany(t *testing.T) {
	ctx := context.Background()
	b := realBackend(t)
	// Lease 1.5s, a beat every 100ms: a beat may come 1.4s late before a
	// lease is lost. With 600ms (500ms of room) a loaded machine lost 25
	// of the 50 watches while the 40 claims were made (.ci/stress beside
	// others' builds, load ~25).
	const lease = 1500 * time.Millisecond
	s := newStore(t, b, Options{Lease: lease, Heartbeat: 100 * time.Millisecond})
	const n = 40
	type run struct {
		req    Request
		l      *Lease
		ctx    context.Context
		cancel context.CancelCauseFunc
		stop   []func()
	}
	runs := make([]*run, n)
	for i := range runs {
		req := newReq(t)
		c, err := s.Claim(ctx, req)
		require.NoError(t, err)
		r := &run{req: req, l: c.Lease}
		r.ctx, r.cancel = context.WithCancelCause(ctx)
		r.stop = append(r.stop, c.Lease.Supervise(r.cancel))
		if i%4 == 0 { // a second watch on the same lease: its own, allocated
			r.stop = append(r.stop, c.Lease.Supervise(r.cancel))
		}
		runs[i] = r
	}
	require.Equal(t, n+n/4, s.beats.Len())

	// Stop the first watch of the doubly watched: the second keeps the lease.
	for i, r := range runs {
		if i%4 == 0 {
			r.stop[0]()
			r.stop = r.stop[1:]
		}
	}
	time.Sleep(3 * lease) // three leases' time: only the beats keep them

	for _, r := range runs {
		require.NoError(t, r.ctx.Err(), "a supervised lease was lost: %v", context.Cause(r.ctx))
		_, err := s.Claim(ctx, r.req)
		require.ErrorIs(t, err, ErrInProgress, "the record is still the owner's")
	}
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, stop := range r.stop {
				stop()
				stop() // more than once: harmless
			}
			require.NoError(t, r.l.Complete(ctx, Response{Code: 201, Body: []byte("ok")}))
		}()
	}
	wg.Wait()
	require.Zero(t, s.beats.Len(), "stopped watches leave nothing queued")
}

// TestSuperviseMaxDuration: past MaxDuration the operation's context is
// cancelled with ErrMaxDuration and its lease is no longer extended: it
// runs out, and the key can be taken over.
func TestSuperviseMaxDuration(t *testing.T) {
	ctx := context.Background()
	b := realBackend(t)
	s := newStore(t, b, Options{Lease: 300 * time.Millisecond, Heartbeat: 50 * time.Millisecond, MaxDuration: 200 * time.Millisecond})
	req := newReq(t)
	// Before the claim, whose start MaxDuration runs from: taken after it,
	// a slow claim made the run look cancelled early.
	started := time.Now()
	c, err := s.Claim(ctx, req)
	require.NoError(t, err)
	runCtx, cancel := context.WithCancelCause(ctx)
	stop := c.Lease.Supervise(cancel)
	defer stop()
	select {
	case <-runCtx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("not cancelled at MaxDuration")
	}
	require.ErrorIs(t, context.Cause(runCtx), ErrMaxDuration)
	require.GreaterOrEqual(t, time.Since(started), 200*time.Millisecond, "not before MaxDuration")
	// No beat extends the lease any more: a retry takes it over once it runs out.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c2, err := s.Claim(ctx, req)
		if err == nil {
			require.Equal(t, TookOver, c2.Status)
			break
		}
		require.ErrorIs(t, err, ErrInProgress)
		require.True(t, time.Now().Before(deadline), "the lease was still extended after MaxDuration")
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	require.Zero(t, s.beats.Len())
}
