package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/observe"
)

// forgets records the Forgotten events an observer gets.
type forgets struct {
	mu     sync.Mutex
	events []observe.Event
}

func (f *forgets) observer() observe.Observer {
	return observe.Func{OnEvent: func(_ context.Context, e *observe.Event) {
		if e.Kind == observe.Forgotten {
			f.mu.Lock()
			f.events = append(f.events, *e)
			f.mu.Unlock()
		}
	}}
}

func (f *forgets) all() []observe.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]observe.Event(nil), f.events...)
}

// testForget is Forget's suite. Stores whose records' leases run out
// have leases under a second: a real Redis younger than a lease would
// count a lease that ran out as live (the grace after a restart).
func testForget(t *testing.T, b backend) {
	ctx := context.Background()

	t.Run("a completed record: the next request runs again", func(t *testing.T) {
		var obs forgets
		s := newStore(t, b, Options{Observer: obs.observer()})
		req := newReq(t)
		c, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 201, Body: []byte("done")}))
		c, err = s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, Replayed, c.Status)

		require.NoError(t, s.Forget(ctx, req.Scope, req.Key))
		_, err = s.Lookup(ctx, req.Scope, req.Key)
		require.ErrorIs(t, err, ErrNotFound)
		runs := 0
		res, err := s.Do(ctx, req, func(context.Context, *Lease) ([]byte, error) { runs++; return []byte("again"), nil })
		require.NoError(t, err)
		require.False(t, res.Replayed)
		require.Equal(t, 1, runs, "the forgotten operation runs again")

		require.ErrorIs(t, s.Forget(ctx, req.Scope+"x", req.Key), ErrNotFound)
		ev := obs.all()
		require.Len(t, ev, 1, "one forget, one event; nothing for a forget that found nothing")
		require.Equal(t, 201, ev[0].Status)
		require.Equal(t, 1, ev[0].Attempt)
		require.Empty(t, ev[0].Problem)
		want := observe.NewEvent(observe.Forgotten, req.Scope, req.Key)
		require.Equal(t, want.KeyHash([]byte("s")), ev[0].KeyHash([]byte("s")))
	})

	t.Run("the tombstone goes too", func(t *testing.T) {
		s := newStore(t, b, Options{Lease: 200 * time.Millisecond, Retention: 400 * time.Millisecond, TombstoneRetention: time.Hour})
		req := newReq(t)
		c, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 201}))
		b.expireRecord(t, s, req)
		_, err = s.Claim(ctx, req)
		require.ErrorIs(t, err, ErrExpired, "only the tombstone is left")
		require.NoError(t, s.Forget(ctx, req.Scope, req.Key))
		c, err = s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, Claimed, c.Status)
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200}))
		require.NoError(t, s.Forget(ctx, req.Scope, req.Key), "record and tombstone")
		require.ErrorIs(t, s.Forget(ctx, req.Scope, req.Key), ErrNotFound)
	})

	t.Run("a live lease is refused; forced, the old owner is fenced", func(t *testing.T) {
		var obs forgets
		s := newStore(t, b, Options{Observer: obs.observer()})
		req := newReq(t)
		c, err := s.Claim(ctx, req)
		require.NoError(t, err)
		old := c.Lease
		require.NoError(t, old.Checkpoint(ctx, "charged", []byte("ch_1")))

		var ip *InProgressError
		require.ErrorAs(t, s.Forget(ctx, req.Scope, req.Key), &ip)
		require.ErrorIs(t, ip, ErrInProgress)
		require.Greater(t, ip.LeaseLeft, time.Second)
		rec, err := s.Lookup(ctx, req.Scope, req.Key)
		require.NoError(t, err, "a refused forget changes nothing")
		require.Equal(t, "charged", rec.RecoveryPoint)
		require.Empty(t, obs.all())

		require.NoError(t, s.ForceForget(ctx, req.Scope, req.Key))
		ev := obs.all()
		require.Len(t, ev, 1)
		require.Equal(t, "forced", ev[0].Problem)
		require.Equal(t, req.Label, ev[0].Route)

		// The old owner's every write is fenced, and brings nothing back.
		require.ErrorIs(t, old.Complete(ctx, Response{Code: 200, Body: []byte("late")}), ErrLeaseLost)
		require.ErrorIs(t, old.Extend(ctx), ErrLeaseLost)
		require.ErrorIs(t, old.Checkpoint(ctx, "late", nil), ErrLeaseLost)
		_, err = s.Lookup(ctx, req.Scope, req.Key)
		require.ErrorIs(t, err, ErrNotFound, "no late write of the old owner brought the record back")

		// The next request, in this very process, runs afresh; the old
		// owner still cannot write.
		c, err = s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, Claimed, c.Status)
		require.Equal(t, 1, c.Lease.Attempt)
		require.ErrorIs(t, old.Complete(ctx, Response{Code: 200, Body: []byte("late")}), ErrLeaseLost)
		require.ErrorIs(t, old.Extend(ctx), ErrLeaseLost)
		require.ErrorIs(t, old.Release(ctx), ErrLeaseLost)
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 201, Body: []byte("new")}))
		c, err = s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, []byte("new"), c.Response.Body)
	})

	t.Run("forced, a running Do is cancelled by its heartbeat and stores nothing", func(t *testing.T) {
		s := newStore(t, b, Options{Lease: 3 * time.Second, Heartbeat: 100 * time.Millisecond})
		req := newReq(t)
		running := make(chan struct{})
		type result struct {
			cause error
			err   error
		}
		out := make(chan result, 1)
		go func() {
			var cause error
			_, err := s.Do(ctx, req, func(ctx context.Context, _ *Lease) ([]byte, error) {
				close(running)
				select {
				case <-ctx.Done():
					cause = context.Cause(ctx)
				case <-time.After(20 * time.Second):
				}
				return []byte("late"), nil // as a handler that finishes anyway
			})
			out <- result{cause, err}
		}()
		<-running
		require.ErrorIs(t, s.Forget(ctx, req.Scope, req.Key), ErrInProgress)
		require.NoError(t, s.ForceForget(ctx, req.Scope, req.Key))
		var r result
		select {
		case r = <-out:
		case <-time.After(10 * time.Second):
			t.Fatal("the run was not told its lease was lost")
		}
		require.ErrorIs(t, r.cause, ErrLeaseLost)
		require.ErrorIs(t, r.err, ErrLeaseLost, "its outcome was not stored")
		_, err := s.Lookup(ctx, req.Scope, req.Key)
		require.ErrorIs(t, err, ErrNotFound, "nothing of the old run came back")
	})

	t.Run("a lease that ran out, or was given back, needs no force", func(t *testing.T) {
		s := newStore(t, b, Options{Lease: 300 * time.Millisecond, Heartbeat: 100 * time.Millisecond})
		req := newReq(t)
		c, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.NoError(t, c.Lease.Checkpoint(ctx, "charged", nil))
		b.expireLease(t, s, req)
		require.NoError(t, s.Forget(ctx, req.Scope, req.Key))
		c, err = s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, Claimed, c.Status, "a first attempt: the history is forgotten")
		require.Empty(t, c.Lease.RecoveryPoint)

		require.NoError(t, c.Lease.Interrupt(ctx))
		rec, err := s.Lookup(ctx, req.Scope, req.Key)
		require.NoError(t, err)
		require.Equal(t, Released, rec.State)
		require.NoError(t, s.Forget(ctx, req.Scope, req.Key))
		_, err = s.Lookup(ctx, req.Scope, req.Key)
		require.ErrorIs(t, err, ErrNotFound)
	})

	t.Run("a waiter is woken by a forced forget and claims", func(t *testing.T) {
		s := newStore(t, b, Options{})
		other := newStore(t, backend{client: b.newClient(t)}, Options{})
		req := newReq(t)
		_, err := s.Claim(ctx, req)
		require.NoError(t, err)
		got := make(chan *Claim, 1)
		go func() {
			actx, cancel := context.WithTimeout(ctx, 8*time.Second)
			defer cancel()
			c, err := other.Await(actx, req)
			if err != nil {
				t.Error(err)
			}
			got <- c
		}()
		// Once the waiter has marked the record, forget it.
		require.Eventually(t, func() bool {
			v, err := b.client.Get(ctx, s.keys(req.Scope, req.Key).Record()).Result()
			return err == nil && v[1] == 'w'
		}, 5*time.Second, 5*time.Millisecond)
		start := time.Now()
		require.NoError(t, s.ForceForget(ctx, req.Scope, req.Key))
		select {
		case c := <-got:
			require.NotNil(t, c)
			require.Equal(t, Claimed, c.Status)
			require.NoError(t, c.Lease.Release(ctx))
		case <-time.After(7 * time.Second):
			t.Fatal("the waiter was not woken")
		}
		t.Logf("woken and claimed %v after the forget", time.Since(start))
	})

	t.Run("this process's replay cache forgets too", func(t *testing.T) {
		s := newStore(t, b, Options{ReplayCacheBytes: 1 << 20})
		req := newReq(t)
		c, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200, Body: []byte("cached")}))
		require.NoError(t, s.Forget(ctx, req.Scope, req.Key))
		c, err = s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, Claimed, c.Status, "not the cached replay")
		require.NoError(t, c.Lease.Release(ctx))
	})

	t.Run("a key that is not a record is left alone", func(t *testing.T) {
		s := newStore(t, b, Options{})
		req := newReq(t)
		name := s.keys(req.Scope, req.Key).Record()
		require.NoError(t, b.client.RPush(ctx, name, "job").Err())
		err := s.ForceForget(ctx, req.Scope, req.Key)
		require.ErrorIs(t, err, ErrUnexpectedReply)
		require.Contains(t, err.Error(), "list")
		require.NoError(t, b.client.Set(ctx, name, "other app's", time.Hour).Err())
		require.ErrorIs(t, s.ForceForget(ctx, req.Scope, req.Key), ErrUnexpectedReply)
		v, err := b.client.Get(ctx, name).Result()
		require.NoError(t, err)
		require.Equal(t, "other app's", v)
	})

	t.Run("by name, as ls shows it", func(t *testing.T) {
		var obs forgets
		s := newStore(t, b, Options{Observer: obs.observer()})
		req := newReq(t)
		c, err := s.Claim(ctx, req)
		require.NoError(t, err)
		name := s.keys(req.Scope, req.Key).Record()

		rec, err := s.LookupName(ctx, name)
		require.NoError(t, err)
		require.Equal(t, Started, rec.State)
		require.Equal(t, req.Label, rec.Label)
		require.Empty(t, rec.Key, "a name tells neither key nor scope")
		var ip *InProgressError
		require.ErrorAs(t, s.ForgetName(ctx, name), &ip, "a live lease is refused")
		require.Empty(t, obs.all())
		require.NoError(t, s.ForceForgetName(ctx, name))
		require.ErrorIs(t, c.Lease.Complete(ctx, Response{Code: 201}), ErrLeaseLost, "the owner is fenced")
		_, err = s.LookupName(ctx, name)
		require.ErrorIs(t, err, ErrNotFound)
		ev := obs.all()
		require.Len(t, ev, 1)
		require.Equal(t, "forced", ev[0].Problem)
		require.Equal(t, req.Label, ev[0].Route)
		require.Empty(t, ev[0].KeyHash([]byte("s")), "no key to hash")

		c, err = s.Claim(ctx, req)
		require.NoError(t, err)
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 201, Body: []byte("done")}))
		require.NoError(t, s.ForgetName(ctx, name), "a completed record needs no force")
		require.ErrorIs(t, s.ForgetName(ctx, name), ErrNotFound)
		require.Len(t, obs.all(), 2)
		require.Equal(t, 201, obs.all()[1].Status)
		c, err = s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, Claimed, c.Status, "the next request runs again")
		require.NoError(t, c.Lease.Release(ctx))

		// Names that are not a record's under the prefix: refused before
		// Redis is asked, whatever the key holds.
		require.NoError(t, b.client.Set(ctx, name+":t", "x", time.Hour).Err())
		t.Cleanup(func() { b.client.Del(context.Background(), name+":t") })
		other := "other:" + name[len(s.Options().Prefix):]
		for _, bad := range []string{"", name + ":t", name + ":lease", name + "x", other, s.Options().Prefix + "session:42",
			s.Options().Prefix + "{" + strings.Repeat("*", 22) + "}", name[:len(name)-1]} {
			var ne *NameError
			require.ErrorAs(t, s.ForgetName(ctx, bad), &ne, "%q", bad)
			require.ErrorIs(t, ne, ErrInvalidRequest)
			require.Equal(t, bad, ne.Name)
			require.ErrorAs(t, s.ForceForgetName(ctx, bad), &ne, "%q", bad)
			_, err := s.LookupName(ctx, bad)
			require.ErrorAs(t, err, &ne, "%q", bad)
		}
		var ne *NameError
		require.ErrorAs(t, s.ForgetName(ctx, name+":t"), &ne)
		require.Contains(t, ne.Error(), "tombstone")
		n, err := b.client.Exists(ctx, name+":t").Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "refused names change nothing")
	})

	t.Run("a record in the previous format", func(t *testing.T) {
		s := newStore(t, b, Options{})
		req := newReq(t)
		k := s.keys(req.Scope, req.Key)
		require.NoError(t, b.client.HSet(ctx, k.Record(), "state", "started", "fp", req.Fingerprint).Err())
		require.NoError(t, b.client.Set(ctx, k.LegacyLease(), "tok", time.Hour).Err())
		require.ErrorIs(t, s.Forget(ctx, req.Scope, req.Key), ErrInProgress, "its lease key is live")
		require.NoError(t, s.ForceForget(ctx, req.Scope, req.Key))
		n, err := b.client.Exists(ctx, k.Record()).Result()
		require.NoError(t, err)
		require.Zero(t, n)
		n, err = b.client.Exists(ctx, k.LegacyLease()).Result()
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

func TestForgetMiniredis(t *testing.T) { testForget(t, miniBackend(t)) }
func TestForgetRedis(t *testing.T)     { testForget(t, realBackend(t)) }
func TestForgetCluster(t *testing.T) {
	t.Parallel() // a cluster of its own, mostly waiting on gossip
	testForget(t, clusterBackend(t))
}

// TestForgetAfterRestart: on a Redis up for less than a lease, a record
// whose lease ran out may belong to an owner that was only cut off while
// Redis was down, and a claim gives it a grace (claim.lua): Forget gives
// the same, and refuses.
func TestForgetAfterRestart(t *testing.T) {
	srv := redistest.Start(t) // just started: up for far less than the lease
	b := backend{client: srv.Client(t)}
	s := newStore(t, b, Options{Lease: time.Hour, Retention: 24 * time.Hour})
	req := newReq(t)
	seed(t, b.client, s, req, seedStuck, time.Now().Add(-2*time.Hour), nil)
	rec, err := s.Lookup(context.Background(), req.Scope, req.Key)
	require.NoError(t, err)
	require.Zero(t, rec.LeaseTTL, "the lease ran out, by the record's TTL")
	var ip *InProgressError
	require.ErrorAs(t, s.Forget(context.Background(), req.Scope, req.Key), &ip)
	require.Greater(t, ip.LeaseLeft, 50*time.Minute, "the grace: a lease less Redis's uptime")
	_, err = s.Claim(context.Background(), req)
	require.ErrorIs(t, err, ErrInProgress, "as a claim")
	require.NoError(t, s.ForceForget(context.Background(), req.Scope, req.Key))
	require.False(t, errors.Is(s.Forget(context.Background(), req.Scope, req.Key), ErrInProgress))
}
