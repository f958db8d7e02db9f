package redisstore

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/skew"
	"github.com/idemkey/idemkey/observe"
)

// TestReplayCacheKeepsItsOwnCopy: with the replay cache on, a caller that
// reuses or changes its buffers, after Do or Complete has stored them or
// after it got a replay, changes nothing any later replay returns.
func TestReplayCacheKeepsItsOwnCopy(t *testing.T) {
	for name, b := range map[string]backend{"redis": realBackend(t), "miniredis": miniBackend(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := newStore(t, b, Options{ReplayCacheBytes: 1 << 20})

			t.Run("Do", func(t *testing.T) {
				req := newReq(t)
				buf := []byte("charge ch_1")
				res, err := s.Do(ctx, req, func(context.Context, *Lease) ([]byte, error) { return buf, nil })
				require.NoError(t, err)
				require.False(t, res.Replayed)
				copy(buf, "XXXXXXXXXXX") // the caller reuses its buffer
				res, err = s.Do(ctx, req, nil)
				require.NoError(t, err)
				require.True(t, res.Replayed)
				require.Equal(t, "charge ch_1", string(res.Data))
				res.Data[0] = 'Y' // a replay's data is the caller's
				res, err = s.Do(ctx, req, nil)
				require.NoError(t, err)
				require.Equal(t, "charge ch_1", string(res.Data))
			})

			t.Run("Complete", func(t *testing.T) {
				req := newReq(t)
				c, err := s.Claim(ctx, req)
				require.NoError(t, err)
				body := []byte(`{"id":"ord_1"}`)
				require.NoError(t, c.Lease.Complete(ctx, Response{Code: 201, Body: body}))
				copy(body, "XXXXXXXXXXXXXX")
				r, err := s.Claim(ctx, req)
				require.NoError(t, err)
				require.Equal(t, Replayed, r.Status)
				require.Equal(t, `{"id":"ord_1"}`, string(r.Response.Body))
			})

			t.Run("a replay fetched from Redis", func(t *testing.T) {
				req := newReq(t)
				other := newStore(t, b, Options{})
				_, err := other.Do(ctx, req, func(context.Context, *Lease) ([]byte, error) { return []byte("from redis"), nil })
				require.NoError(t, err)
				res, err := s.Do(ctx, req, nil) // fetched from Redis, and cached
				require.NoError(t, err)
				require.True(t, res.Replayed)
				copy(res.Data, "XXXX")
				res, err = s.Do(ctx, req, nil) // from the cache
				require.NoError(t, err)
				require.Equal(t, "from redis", string(res.Data))
			})
		})
	}
}

// TestReplayCacheEvictsLeastRecentlyUsed: a full replay cache makes room by
// dropping the outcome replayed least recently, not the oldest stored: a
// key that is being retried stays cached while fresh outcomes come and go.
func TestReplayCacheEvictsLeastRecentlyUsed(t *testing.T) {
	for name, b := range map[string]backend{"redis": realBackend(t), "miniredis": miniBackend(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var claims atomic.Int32 // claims that reached Redis
			obs := observe.Func{OnRedis: func(_ context.Context, c *observe.Call) {
				if c.Script == "claim" {
					claims.Add(1)
				}
			}}
			body := bytes.Repeat([]byte("b"), 100)
			// Room for two entries of ~225 bytes (key, body, overhead), not three.
			s := newStore(t, b, Options{ReplayCacheBytes: 500, Observer: obs})
			complete := func(req Request) {
				t.Helper()
				c, err := s.Claim(ctx, req)
				require.NoError(t, err)
				require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200, Body: body}))
			}
			replay := func(req Request) (fromRedis bool) {
				t.Helper()
				n := claims.Load()
				c, err := s.Claim(ctx, req)
				require.NoError(t, err)
				require.Equal(t, Replayed, c.Status)
				return claims.Load() > n
			}
			hot, cold, fresh := newReq(t), newReq(t), newReq(t)
			complete(hot)
			complete(cold)
			require.False(t, replay(hot), "cached")
			complete(fresh) // the cache is full: one entry goes
			require.False(t, replay(hot), "the hot key, replayed last, was evicted")
			require.False(t, replay(fresh))
			require.True(t, replay(cold), "the least recently used entry should have gone")
		})
	}
}

// TestDeadFlightIsReplaced: a lease that is never completed or released
// (its caller dropped it, or its run is stuck) leaves its flight behind.
// Once the lease is over by this process's clock, the next claim of the key
// replaces the flight, so that its own run collapses duplicates again, and
// flights nobody asks for again are swept, instead of staying in memory
// for the life of the process.
func TestDeadFlightIsReplaced(t *testing.T) {
	for name, b := range map[string]backend{"redis": realBackend(t), "miniredis": miniBackend(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var claims atomic.Int32 // claims that reached Redis
			obs := observe.Func{OnRedis: func(_ context.Context, c *observe.Call) {
				if c.Script == "claim" {
					claims.Add(1)
				}
			}}
			// Under a second: no after-restart grace on a fresh redis-server.
			s := newStore(t, b, Options{Lease: 900 * time.Millisecond, Observer: obs})
			flights := s.flights.Len
			lapse := func(l *Lease) { // by this process's clock and by Redis's
				t.Helper()
				l.sign.Set(time.Now().Add(-time.Hour))
				require.NoError(t, b.client.PExpire(ctx, l.keys.Record(), s.opts.Retention-s.opts.Lease).Err())
			}

			req := newReq(t)
			dropped, err := s.Claim(ctx, req)
			require.NoError(t, err)
			lapse(dropped.Lease) // never completed nor released
			c, err := s.Claim(ctx, req)
			require.NoError(t, err)
			require.Equal(t, TookOver, c.Status)
			before := claims.Load()
			for range 5 {
				_, err := s.Claim(ctx, req)
				require.ErrorIs(t, err, ErrInProgress)
			}
			require.Equal(t, before, claims.Load(), "the takeover's duplicates asked Redis: it runs without a flight")
			require.NoError(t, c.Lease.Complete(ctx, Response{Code: 201}))
			require.Zero(t, flights(), "a flight stayed behind")

			// Dead flights that no claim comes back for are swept as others come and go.
			var abandoned []*Lease
			for range 100 {
				c, err := s.Claim(ctx, newReq(t))
				require.NoError(t, err)
				abandoned = append(abandoned, c.Lease)
			}
			for _, l := range abandoned { // their leases are over by this process's clock
				l.sign.Set(time.Now().Add(-time.Hour))
			}
			require.Equal(t, 100, flights())
			for range 100 {
				c, err := s.Claim(ctx, newReq(t))
				require.NoError(t, err)
				require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200}))
			}
			require.Zero(t, flights(), "dead flights were not swept")
		})
	}
}

// TestLeaseLeftClockStep: how long a lease holds is measured on the
// monotonic clock from its last sign of life, so a step of the system
// clock after the sign neither ends it at once (a run cancelled for
// nothing) nor keeps it alive for the length of the step (a run going on,
// with Redis out of reach, after its lease ran out and another attempt
// took the key over: the side effect twice).
func TestLeaseLeftClockStep(t *testing.T) {
	const lease = 10 * time.Second
	l := &Lease{store: &Store{opts: Options{Lease: lease}}}
	for _, step := range []time.Duration{time.Hour, -time.Hour} {
		l.sign.Set(skew.Wall(time.Now(), -step)) // signed just before the clock stepped by step
		// Stepped, a wall-clock lease would have an hour too much or too
		// little; half the lease of room lets the machine stall 5s.
		if left := (*holder)(l).Left(); left <= lease/2 || left > lease {
			t.Errorf("clock stepped by %v after the last sign of life: %v left of a %v lease", step, left, lease)
		}
	}
}
