package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// doUntilDone calls Do until it gets an outcome other than in-progress,
// within a deadline.
func doUntilDone(ctx context.Context, s *Store, req Request, fn func(context.Context, *Lease) ([]byte, error)) (*Result, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := s.Do(ctx, req, fn)
		if !errors.Is(err, ErrInProgress) || time.Now().After(deadline) {
			return res, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testDo(t *testing.T, b backend) {
	ctx := context.Background()

	t.Run("50 callers on 5 stores run fn once and all get its result", func(t *testing.T) {
		stores := make([]*Store, 5)
		for i := range stores {
			stores[i] = newStore(t, backend{client: b.newClient(t)}, Options{})
		}
		req := newReq(t)
		var runs atomic.Int32
		fn := func(ctx context.Context, l *Lease) ([]byte, error) {
			n := runs.Add(1)
			time.Sleep(30 * time.Millisecond) // long enough for the others to pile up
			return fmt.Appendf(nil, "result of run %d", n), nil
		}
		const n = 50
		results := make([]*Result, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				results[i], errs[i] = doUntilDone(ctx, stores[i%len(stores)], req, fn)
			})
		}
		close(start)
		wg.Wait()
		require.EqualValues(t, 1, runs.Load())
		fresh := 0
		for i := range n {
			require.NoError(t, errs[i])
			require.Equal(t, "result of run 1", string(results[i].Data))
			if !results[i].Replayed {
				fresh++
			}
		}
		require.Equal(t, 1, fresh)
	})

	t.Run("a transient error releases the key; the next call runs fn", func(t *testing.T) {
		s := newStore(t, b, Options{})
		req := newReq(t)
		boom := errors.New("upstream 503")
		var runs atomic.Int32
		fn := func(context.Context, *Lease) ([]byte, error) {
			if runs.Add(1) == 1 {
				return nil, Transient(boom)
			}
			return []byte("ok"), nil
		}
		_, err := s.Do(ctx, req, fn)
		require.ErrorIs(t, err, boom)
		require.True(t, IsTransient(err))
		_, err = s.Lookup(ctx, req.Scope, req.Key)
		require.ErrorIs(t, err, ErrNotFound)
		res, err := s.Do(ctx, req, fn)
		require.NoError(t, err)
		require.Equal(t, "ok", string(res.Data))
		require.False(t, res.Replayed)
		res, err = s.Do(ctx, req, fn)
		require.NoError(t, err)
		require.True(t, res.Replayed)
		require.EqualValues(t, 2, runs.Load())
	})

	t.Run("a final error is stored and replayed as FailedError", func(t *testing.T) {
		s := newStore(t, b, Options{})
		req := newReq(t)
		declined := errors.New("card declined")
		var runs atomic.Int32
		fn := func(context.Context, *Lease) ([]byte, error) {
			runs.Add(1)
			return nil, declined
		}
		_, err := s.Do(ctx, req, fn)
		require.ErrorIs(t, err, declined, "the caller that ran fn gets its own error")
		require.ErrorIs(t, err, ErrFailed)
		require.False(t, IsTransient(err))
		_, err = s.Do(ctx, req, fn)
		require.ErrorIs(t, err, ErrFailed)
		var fe *FailedError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "card declined", fe.Message)
		require.Nil(t, fe.Err)
		require.EqualValues(t, 1, runs.Load())
	})

	t.Run("mismatch and in-progress are errors", func(t *testing.T) {
		s := newStore(t, b, Options{})
		req := newReq(t)
		entered, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := s.Do(ctx, req, func(context.Context, *Lease) ([]byte, error) {
				close(entered)
				<-release
				return []byte("x"), nil
			})
			done <- err
		}()
		<-entered
		_, err := s.Do(ctx, req, func(context.Context, *Lease) ([]byte, error) { panic("must not run") })
		require.ErrorIs(t, err, ErrInProgress)
		other := req
		other.Fingerprint = "other"
		_, err = s.Do(ctx, other, func(context.Context, *Lease) ([]byte, error) { panic("must not run") })
		require.ErrorIs(t, err, ErrMismatch)
		close(release)
		require.NoError(t, <-done)
	})

	t.Run("a panic releases the key and keeps the checkpoint for the next call", func(t *testing.T) {
		s := newStore(t, b, Options{})
		req := newReq(t)
		require.PanicsWithValue(t, "crash after charge", func() {
			_, _ = s.Do(ctx, req, func(ctx context.Context, l *Lease) ([]byte, error) {
				require.NoError(t, l.Checkpoint(ctx, "charged", []byte("ch_1")))
				panic("crash after charge")
			})
		})
		res, err := s.Do(ctx, req, func(ctx context.Context, l *Lease) ([]byte, error) {
			require.Equal(t, 2, l.Attempt)
			require.Equal(t, "charged", l.RecoveryPoint)
			return append([]byte("resumed with "), l.RecoveryData...), nil
		})
		require.NoError(t, err)
		require.Equal(t, "resumed with ch_1", string(res.Data))
	})

	t.Run("the heartbeat keeps a slow fn's key for many leases", func(t *testing.T) {
		const lease = 500 * time.Millisecond // roomy: -race on a loaded 2-core machine delays beats
		s := newStore(t, b, Options{Lease: lease})
		req := newReq(t)
		var runs atomic.Int32
		finish := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := s.Do(ctx, req, func(context.Context, *Lease) ([]byte, error) {
				runs.Add(1)
				<-finish
				return []byte("slow"), nil
			})
			done <- err
		}()
		// Probe for three leases' worth of time: always in progress, never a takeover.
		require.Eventually(t, func() bool { return runs.Load() == 1 }, 5*time.Second, time.Millisecond)
		probeUntil := time.Now().Add(3 * lease)
		for probes := 0; time.Now().Before(probeUntil) && probes < 1000; probes++ {
			_, err := s.Do(ctx, req, func(context.Context, *Lease) ([]byte, error) {
				runs.Add(1)
				return nil, nil
			})
			require.ErrorIs(t, err, ErrInProgress)
			time.Sleep(20 * time.Millisecond)
		}
		close(finish)
		require.NoError(t, <-done)
		require.EqualValues(t, 1, runs.Load())
	})

	t.Run("a lost lease cancels fn's context with ErrLeaseLost", func(t *testing.T) {
		s := newStore(t, b, Options{Lease: 150 * time.Millisecond})
		req := newReq(t)
		var cause error
		_, err := s.Do(ctx, req, func(ctx context.Context, l *Lease) ([]byte, error) {
			// Someone else owns the record now, as after a takeover.
			steal(t, b.client, l)
			select {
			case <-ctx.Done():
				cause = context.Cause(ctx)
				return nil, ctx.Err()
			case <-time.After(10 * time.Second):
				return nil, errors.New("not cancelled")
			}
		})
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, ErrLeaseLost)
		require.True(t, IsTransient(err))
		require.ErrorIs(t, cause, ErrLeaseLost)
	})

	t.Run("an outcome fenced by a takeover is an error, never a success", func(t *testing.T) {
		// fn returns at once after the takeover, before any beat: its
		// Complete is what finds the record another attempt's. Its caller
		// must not take the outcome for the key's answer.
		s := newStore(t, b, Options{Lease: 2 * time.Second})
		for _, failed := range []bool{false, true} {
			_, err := s.Do(ctx, newReq(t), func(ctx context.Context, l *Lease) ([]byte, error) {
				steal(t, b.client, l)
				if failed {
					return nil, errors.New("card declined")
				}
				return []byte("charged"), nil
			})
			require.ErrorIs(t, err, ErrLeaseLost, "failed: %v", failed)
		}
	})

	t.Run("fn outliving MaxDuration is cancelled and the key freed", func(t *testing.T) {
		s := newStore(t, b, Options{Lease: 150 * time.Millisecond, MaxDuration: 100 * time.Millisecond})
		req := newReq(t)
		var cause error
		_, err := s.Do(ctx, req, func(ctx context.Context, l *Lease) ([]byte, error) {
			<-ctx.Done() // bounded by MaxDuration
			cause = context.Cause(ctx)
			return nil, fmt.Errorf("gave up: %w", ctx.Err())
		})
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, ErrMaxDuration)
		require.True(t, IsTransient(err))
		require.ErrorIs(t, cause, ErrMaxDuration)
		res, err := s.Do(ctx, req, func(context.Context, *Lease) ([]byte, error) { return []byte("second"), nil })
		require.NoError(t, err)
		require.Equal(t, "second", string(res.Data))
	})
}
