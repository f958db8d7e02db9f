package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

// pttl returns the TTL Redis gives the key.
func pttlOf(t *testing.T, c redis.Cmdable, key string) time.Duration {
	t.Helper()
	d, err := c.PTTL(context.Background(), key).Result()
	require.NoError(t, err)
	return d
}

// testRetention is the suite of Request.Retention.
func testRetention(t *testing.T, b backend) {
	ctx := context.Background()
	near := func(t *testing.T, want, got time.Duration, what string) {
		t.Helper()
		require.InDelta(t, want.Seconds(), got.Seconds(), 60, "%s: want about %v, got %v", what, want, got)
	}

	t.Run("each request's record lives its own retention, and its lease is the store's", func(t *testing.T) {
		s := newStore(t, b, Options{TombstoneRetention: time.Hour})
		routes := map[string]time.Duration{"payment": 0, "webhook": 7 * 24 * time.Hour, "lookup": 10 * time.Minute}
		for name, ret := range routes {
			req := newReq(t)
			req.Retention = ret
			want := ret
			if ret == 0 {
				want = s.opts.Retention
			}
			c, err := s.Claim(ctx, req)
			require.NoError(t, err)
			k := s.keys(req.Scope, req.Key)
			near(t, want, pttlOf(t, b.client, k.Record()), name+" claimed")
			rec, err := s.Lookup(ctx, req.Scope, req.Key)
			require.NoError(t, err)
			require.InDelta(t, s.opts.Lease.Seconds(), rec.LeaseTTL.Seconds(), 1, "%s: the lease is the store's", name)

			require.NoError(t, c.Lease.Extend(ctx))
			near(t, want, pttlOf(t, b.client, k.Record()), name+" extended")
			require.NoError(t, c.Lease.Checkpoint(ctx, "p", nil))
			near(t, want, pttlOf(t, b.client, k.Record()), name+" checkpointed")
			rec, err = s.Lookup(ctx, req.Scope, req.Key)
			require.NoError(t, err)
			require.InDelta(t, s.opts.Lease.Seconds(), rec.LeaseTTL.Seconds(), 1, "%s: the lease after a checkpoint", name)

			require.NoError(t, c.Lease.Complete(ctx, Response{Code: 201}))
			near(t, want, pttlOf(t, b.client, k.Record()), name+" completed")
			near(t, want+time.Hour, pttlOf(t, b.client, k.Tombstone()), name+" tombstone")
		}
	})

	t.Run("a takeover keeps the lease, with the taker's retention", func(t *testing.T) {
		s := newStore(t, b, Options{Lease: 300 * time.Millisecond, Heartbeat: 100 * time.Millisecond})
		req := newReq(t)
		req.Retention = time.Hour
		c, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.NoError(t, c.Lease.Checkpoint(ctx, "charged", []byte("ch_1")))
		_, err = s.Claim(ctx, req)
		require.ErrorIs(t, err, ErrInProgress, "the lease holds, whatever the retention")
		b.expireLease(t, s, req)

		req.Retention = 10 * time.Minute // the same key claimed with another retention
		c2, err := newStore(t, b, Options{Lease: 300 * time.Millisecond, Heartbeat: 100 * time.Millisecond}).Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, TookOver, c2.Status)
		require.Equal(t, "charged", c2.Lease.RecoveryPoint)
		near(t, 10*time.Minute, pttlOf(t, b.client, s.keys(req.Scope, req.Key).Record()), "taken over")
		rec, err := s.Lookup(ctx, req.Scope, req.Key)
		require.NoError(t, err)
		require.Positive(t, rec.LeaseTTL, "the taker holds a lease")
		require.LessOrEqual(t, rec.LeaseTTL, 300*time.Millisecond)
		require.ErrorIs(t, c.Lease.Complete(ctx, Response{Code: 200}), ErrLeaseLost, "the old owner is fenced")
		require.NoError(t, c2.Lease.Complete(ctx, Response{Code: 201}))
	})

	t.Run("Do takes it per call", func(t *testing.T) {
		s := newStore(t, b, Options{})
		req := newReq(t)
		req.Retention = 2 * time.Hour
		_, err := s.Do(ctx, req, func(context.Context, *Lease) ([]byte, error) { return []byte("ok"), nil })
		require.NoError(t, err)
		near(t, 2*time.Hour, pttlOf(t, b.client, s.keys(req.Scope, req.Key).Record()), "Do")
	})

	t.Run("invalid retentions are refused before anything is claimed", func(t *testing.T) {
		s := newStore(t, b, Options{Lease: 10 * time.Second, MaxDuration: time.Minute})
		for _, d := range []time.Duration{-time.Second, time.Second, 10 * time.Second, 10*time.Second + time.Microsecond, time.Minute} {
			require.ErrorIs(t, s.ValidateRetention(d), ErrInvalidRequest, "%v", d)
			req := newReq(t)
			req.Retention = d
			_, err := s.Claim(ctx, req)
			require.ErrorIs(t, err, ErrInvalidRequest, "%v", d)
			_, err = s.Do(ctx, req, func(context.Context, *Lease) ([]byte, error) { return nil, nil })
			require.ErrorIs(t, err, ErrInvalidRequest, "%v", d)
			_, err = s.Lookup(ctx, req.Scope, req.Key)
			require.ErrorIs(t, err, ErrNotFound, "%v: nothing claimed", d)
		}
		for _, d := range []time.Duration{0, time.Minute + time.Millisecond, time.Hour} {
			require.NoError(t, s.ValidateRetention(d), "%v", d)
		}
	})
}

func TestRetentionMiniredis(t *testing.T) { testRetention(t, miniBackend(t)) }
func TestRetentionRedis(t *testing.T) {
	t.Parallel() // its own server; waits for records to expire
	testRetention(t, realBackend(t))
}

func TestRetentionCluster(t *testing.T) {
	t.Parallel() // its own servers; waits for records to expire
	testRetention(t, clusterBackend(t))
}

// The replay cache keeps an outcome no longer than its request's
// retention: once the record expired in Redis, the key runs again, also in
// the process that stored it.
func TestReplayCacheHonoursRequestRetention(t *testing.T) {
	b := realBackend(t)
	ctx := context.Background()
	s := newStore(t, b, Options{ReplayCacheBytes: 1 << 20, Lease: 200 * time.Millisecond})
	req := newReq(t)
	req.Retention = 600 * time.Millisecond
	c, err := s.Claim(ctx, req)
	require.NoError(t, err)
	require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200, Body: []byte("short-lived")}))
	b.expireRecord(t, s, req)
	require.Eventually(t, func() bool {
		c, err = s.Claim(ctx, req)
		require.NoError(t, err)
		if c.Lease != nil {
			require.NoError(t, c.Lease.Release(ctx))
		}
		return c.Status == Claimed
	}, 5*time.Second, 20*time.Millisecond, "the cache replayed an outcome its record no longer has")
}

// On a Redis up for less than a lease, a record with its own retention
// whose lease ran out is not taken over at once (its owner may only have
// been cut off while Redis was down): the grace is the lease, not the
// retention.
func TestRequestRetentionRestartGrace(t *testing.T) {
	srv := redistest.Start(t)
	b := backend{client: srv.Client(t)}
	s := newStore(t, b, Options{Lease: time.Minute})
	req := newReq(t)
	req.Retention = 7 * 24 * time.Hour
	s2 := newStore(t, b, Options{Lease: time.Minute, Retention: req.Retention})
	seed(t, b.client, s2, req, seedStuck, time.Now().Add(-time.Hour), nil) // as a claim with that retention left it
	_, err := s.Claim(context.Background(), req)
	var ip *InProgressError
	require.ErrorAs(t, err, &ip)
	require.Greater(t, ip.LeaseLeft, 30*time.Second)
	require.LessOrEqual(t, ip.LeaseLeft, time.Minute, "the grace is a lease, not the retention")
}
