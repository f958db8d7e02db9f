package redisstore

// Regression tests for exactly once on every path: each one
// failed on the store as it was before the fix.

import (
	"context"
	"errors"

	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

// TestLiveOwnerOutlivesRetention: a heartbeating owner whose run lasts longer
// than Retention keeps its record; a duplicate never claims it afresh.
func TestLiveOwnerOutlivesRetention(t *testing.T) {
	b := realBackend(t)
	s := newStore(t, b, Options{Lease: 150 * time.Millisecond, Retention: 300 * time.Millisecond})
	ctx := context.Background()
	req := newReq(t)
	c, err := s.Claim(ctx, req)
	require.NoError(t, err)
	stop := c.Lease.keepAlive(nil)
	defer stop()

	deadline := time.Now().Add(4 * s.opts.Retention)
	for time.Now().Before(deadline) {
		_, err := s.Claim(ctx, req)
		require.ErrorIs(t, err, ErrInProgress, "a duplicate got the key of a live owner")
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	require.NoError(t, c.Lease.Complete(ctx, Response{Code: 1, Body: []byte("done")}))
	r, err := s.Claim(ctx, req)
	require.NoError(t, err)
	require.Equal(t, Replayed, r.Status)
}

func TestNewRejectsRetentionWithinMaxDuration(t *testing.T) {
	_, err := New(redis.NewClient(&redis.Options{}), Options{Retention: time.Minute, MaxDuration: time.Minute})
	require.ErrorContains(t, err, "max duration")
	_, err = New(redis.NewClient(&redis.Options{}), Options{Retention: time.Minute, MaxDuration: 59 * time.Second})
	require.NoError(t, err)
}

// TestEvictionKeepsLiveOwner: under an evicting policy that prefers the
// shortest TTL, memory pressure must not hand a live owner's key to a
// duplicate. (Evicting whole records can still lose outcomes: the store
// documents that it needs noeviction.)
func TestEvictionKeepsLiveOwner(t *testing.T) {
	srv := redistest.Start(t, redistest.Args("--maxmemory", "8mb", "--maxmemory-policy", "volatile-ttl"))
	client := srv.Client(t)
	s := newStore(t, backend{client: client}, Options{Lease: 10 * time.Second})
	ctx := context.Background()
	req := newReq(t)
	c, err := s.Claim(ctx, req)
	require.NoError(t, err)
	require.Equal(t, Claimed, c.Status)

	// Fill memory with other keys that outlive the lease but not the record,
	// until Redis has evicted plenty.
	val := strings.Repeat("x", 1024)
	for i := 0; i < 40_000; i++ {
		pipe := client.Pipeline()
		for j := range 100 {
			pipe.Set(ctx, fmt.Sprintf("filler:%d:%d", i, j), val, time.Hour)
		}
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		info, err := client.Info(ctx, "stats").Result()
		require.NoError(t, err)
		if evicted := infoField(info, "evicted_keys"); evicted > 20_000 {
			break
		}
	}
	_, err = s.Claim(ctx, req)
	require.ErrorIs(t, err, ErrInProgress, "a duplicate took over a live owner's key after eviction")
	require.NoError(t, c.Lease.Complete(ctx, Response{Code: 1}))
}

func infoField(info, name string) int {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			var n int
			_, _ = fmt.Sscan(v, &n)
			return n
		}
	}
	return -1
}

// lossy is a client whose replies can be lost: the script runs in Redis,
// the caller gets an error.
type lossy struct {
	redis.Scripter
	lose atomic.Bool
}

func (l *lossy) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	cmd := l.Scripter.EvalSha(ctx, sha, keys, args...)
	if l.lose.Load() && cmd.Err() == nil {
		lost := redis.NewCmd(ctx)
		lost.SetErr(io.ErrUnexpectedEOF)
		return lost
	}
	return cmd
}

// TestLostClaimReplyIsHandedBack: a claim that took effect in Redis but whose
// reply never arrived is released in the background, so a retry is not told
// "in progress" for a whole lease while nothing runs.
func TestLostClaimReplyIsHandedBack(t *testing.T) {
	for name, b := range map[string]backend{"redis": realBackend(t), "miniredis": miniBackend(t)} {
		t.Run(name, func(t *testing.T) {
			l := &lossy{Scripter: b.client}
			lossyStore, err := New(l, Options{Lease: time.Minute})
			require.NoError(t, err)
			s := newStore(t, b, Options{Lease: time.Minute})
			ctx := context.Background()
			req := newReq(t)
			_, err = s.Claim(ctx, Request{Key: "warm-up"}) // load the scripts
			require.NoError(t, err)

			l.lose.Store(true)
			_, err = lossyStore.Claim(ctx, req)
			require.Error(t, err)
			l.lose.Store(false)

			var c *Claim
			require.Eventually(t, func() bool {
				c, err = s.Claim(ctx, req)
				return err == nil
			}, 5*time.Second, 10*time.Millisecond, "the lost claim still holds the key: %v", err)
			require.Equal(t, Claimed, c.Status)
			require.Equal(t, 1, c.Lease.Attempt)
		})
	}
}

// TestLostWaitReplyIsHandedBack: a claim whose WAIT failed with an error
// other than too few replicas is given back too.
func TestLostWaitReplyIsHandedBack(t *testing.T) {
	master := redistest.Start(t, redistest.Args("--repl-diskless-sync-delay", "0"))
	_ = redistest.Start(t, redistest.Args("--replicaof", "127.0.0.1", fmt.Sprint(master.Port())))
	redistest.WaitReplicas(t, master, 1)
	client := master.Client(t)
	var failWait atomic.Bool
	client.AddHook(waitFailer{&failWait})
	s := newStore(t, backend{client: client}, Options{Lease: time.Minute, Replicas: 1})
	plain := newStore(t, backend{client: master.Client(t)}, Options{Lease: time.Minute})
	ctx := context.Background()
	req := newReq(t)
	warm, err := s.Claim(ctx, Request{Key: "warm-up"})
	require.NoError(t, err)
	require.NoError(t, warm.Lease.Complete(ctx, Response{}))

	failWait.Store(true)
	_, err = s.Claim(ctx, req)
	require.Error(t, err)
	failWait.Store(false)
	require.Eventually(t, func() bool {
		_, err = plain.Claim(ctx, req)
		return err == nil
	}, 5*time.Second, 10*time.Millisecond, "the claim whose WAIT failed still holds the key: %v", err)
}

// waitFailer makes the WAIT of a pipeline fail after it ran.
type waitFailer struct{ on *atomic.Bool }

func (waitFailer) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (waitFailer) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (w waitFailer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if w.on.Load() {
			for _, c := range cmds {
				if strings.EqualFold(c.Name(), "wait") {
					c.SetErr(io.ErrUnexpectedEOF)
				}
			}
		}
		return err
	}
}

func TestReplicaTimeoutUnderAMillisecond(t *testing.T) {
	s, err := New(redis.NewClient(&redis.Options{}), Options{Replicas: 1, ReplicaTimeout: 500 * time.Microsecond})
	require.NoError(t, err)
	require.Equal(t, time.Millisecond, s.Options().ReplicaTimeout, "WAIT n 0 would block for ever")
}

// TestReleasedTakeoverKeepsHistory: a takeover that fails transiently and
// releases keeps the record, so the next claim is attempt 3 and knows that
// earlier attempts ran.
func TestReleasedTakeoverKeepsHistory(t *testing.T) {
	for name, b := range map[string]backend{"redis": realBackend(t), "miniredis": miniBackend(t)} {
		t.Run(name, func(t *testing.T) {
			// Each attempt in a process of its own.
			opts := Options{Lease: 200 * time.Millisecond}
			s := newStore(t, b, opts)
			ctx := context.Background()
			req := newReq(t)
			first, err := s.Claim(ctx, req)
			require.NoError(t, err)
			require.Equal(t, 1, first.Lease.Attempt)
			b.expireLease(t, s, req) // attempt 1 crashed
			second, err := newStore(t, b, opts).Claim(ctx, req)
			require.NoError(t, err)
			require.Equal(t, TookOver, second.Status)
			require.Equal(t, 2, second.Lease.Attempt)
			require.NoError(t, second.Lease.Release(ctx)) // attempt 2 fails transiently

			third, err := newStore(t, b, opts).Claim(ctx, req)
			require.NoError(t, err)
			require.Equal(t, TookOver, third.Status, "the history of attempts 1 and 2 was forgotten")
			require.Equal(t, 3, third.Lease.Attempt)
		})
	}
}

// TestDoCancelledByCallerIsNotForgotten: a run that ends because the
// caller's context ended may have done its side effect; the record stays, so
// the next claim is a takeover (Attempt > 1) that can reconcile.
func TestDoCancelledByCallerIsNotForgotten(t *testing.T) {
	for name, b := range map[string]backend{"redis": realBackend(t), "miniredis": miniBackend(t)} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t, b, Options{Lease: time.Minute})
			req := newReq(t)
			ctx, cancel := context.WithCancel(context.Background())
			_, err := s.Do(ctx, req, func(fctx context.Context, _ *Lease) ([]byte, error) {
				// the side effect happened; then the caller gives up
				cancel()
				<-fctx.Done()
				return nil, fctx.Err()
			})
			require.Error(t, err)
			require.True(t, IsTransient(err))

			c, err := s.Claim(context.Background(), req)
			require.NoError(t, err)
			require.Equal(t, TookOver, c.Status, "the cancelled run was forgotten: a retry would run it as attempt 1")
			require.Equal(t, 2, c.Lease.Attempt)
		})
	}
}

// hangs is a client whose next extend calls hang (never reach Redis) until
// their context ends: a Redis that does not answer a beat.
type hangs struct {
	redis.Scripter
	hang atomic.Int32 // extend calls still to hang
	hung atomic.Int32 // extend calls hung so far
}

func (h *hangs) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if sha == extendScript.Hash() && h.hang.Add(-1) >= 0 {
		h.hung.Add(1)
		<-ctx.Done()
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd
	}
	return h.Scripter.EvalSha(ctx, sha, keys, args...)
}

// TestHeartbeatSurvivesOneHungBeat: one beat that hangs must not use up the
// lease. Lease 2.4s, heartbeat 1s: the first beat (1s after the claim) hangs
// until its own deadline (Heartbeat/3) and is tried again Heartbeat/5 later,
// 1.53s after the claim, 0.87s before the lease would run out. Duplicates
// must get ErrInProgress throughout, until past the first lease and another
// beat.
//
// The hang is one call, counted, not a window of time: with the hang from
// 0.4s to 1s by timers, a 1.2s lease and a 500ms heartbeat, the beat that
// had to land came 167ms before the lease's end, and once in a full run on
// a busy machine (load 7) a duplicate took the key at 2.29s.
func TestHeartbeatSurvivesOneHungBeat(t *testing.T) {
	b := realBackend(t)
	h := &hangs{Scripter: b.client}
	h.hang.Store(1)
	const lease, every = 2400 * time.Millisecond, time.Second
	opts := Options{Lease: lease, Heartbeat: every}
	owner, err := New(h, opts)
	require.NoError(t, err)
	other := newStore(t, b, opts)
	ctx := context.Background()
	req := newReq(t)
	c, err := owner.Claim(ctx, req)
	require.NoError(t, err)
	start := time.Now()
	lost := make(chan struct{})
	var once sync.Once
	stop := c.Lease.keepAlive(func() { once.Do(func() { close(lost) }) })
	defer stop()

	for time.Since(start) < lease+every || h.hung.Load() == 0 {
		require.Less(t, time.Since(start), time.Minute, "no beat hung")
		_, err := other.Claim(ctx, req)
		require.ErrorIs(t, err, ErrInProgress, "a duplicate took the key at %v", time.Since(start))
		select {
		case <-lost:
			t.Fatalf("the owner lost its lease at %v", time.Since(start))
		case <-time.After(20 * time.Millisecond):
		}
	}
	require.EqualValues(t, 1, h.hung.Load(), "beats hung")
	require.NoError(t, c.Lease.Complete(ctx, Response{Code: 1}))
}

// TestRestartGivesOwnersALease: an owner cut off while Redis was down is not
// taken over the moment Redis is back, though its lease ran out meanwhile:
// it first gets a lease of Redis's uptime to renew or complete.
func TestRestartGivesOwnersALease(t *testing.T) {
	t.Parallel() // its own servers; mostly waiting on leases and restarts
	srv := redistest.Start(t, redistest.Args("--appendonly", "yes", "--appendfsync", "always"))
	opts := Options{Lease: 2 * time.Second}
	owner := newStore(t, backend{client: srv.Client(t)}, opts)
	ctx := context.Background()
	req := newReq(t)
	c, err := owner.Claim(ctx, req)
	require.NoError(t, err)

	srv.Kill()
	time.Sleep(2500 * time.Millisecond) // the lease runs out while Redis is down
	srv.Restart(t)
	other := newStore(t, backend{client: srv.Client(t)}, opts)
	var cerr error
	require.Eventually(t, func() bool { // until Redis answers the claim
		_, cerr = other.Claim(ctx, req)
		return cerr == nil || errors.Is(cerr, ErrInProgress)
	}, 10*time.Second, 10*time.Millisecond)
	require.ErrorIs(t, cerr, ErrInProgress, "taken over the moment Redis came back")

	// The owner renews within that grace and keeps its key.
	require.NoError(t, c.Lease.Extend(ctx))
	_, err = other.Claim(ctx, req)
	require.ErrorIs(t, err, ErrInProgress)

	// Without renewal, the key is taken over once Redis has been up a lease.
	require.Eventually(t, func() bool {
		n, err := other.Claim(ctx, req)
		return err == nil && n.Status == TookOver
	}, 10*time.Second, 50*time.Millisecond)
}

// TestRestartGraceIgnoresRetentionChange: the lease a restarted Redis gives
// an owner before a takeover is a lease, whatever retention the claimer
// runs with: the owner's, as the record tells it, never longer than the
// claimer's own. claim.lua used to compute it as the claimer's retention
// minus the owner's threshold, so a rolling deploy that changed Retention
// stretched it to the difference (24h more: every crashed owner's key held
// for a day on a Redis up less than that) or removed it (a shorter one).
func TestRestartGraceIgnoresRetentionChange(t *testing.T) {
	t.Parallel() // its own servers; mostly waiting on leases and restarts
	ctx := context.Background()

	t.Run("a longer retention does not stretch it", func(t *testing.T) {
		srv := redistest.Start(t)
		owner := newStore(t, backend{client: srv.Client(t)}, Options{Lease: time.Second, Retention: 10 * time.Second})
		next := newStore(t, backend{client: srv.Client(t)}, Options{Lease: time.Second, Retention: time.Hour})
		req := newReq(t)
		_, err := owner.Claim(ctx, req) // and then it crashes
		require.NoError(t, err)
		backend{}.expireLease(t, owner, req)
		// Redis has been up longer than a lease (a second) by now.
		c, err := next.Claim(ctx, req)
		require.NoError(t, err, "a crashed owner's key held after its lease")
		require.Equal(t, TookOver, c.Status)
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200}))
	})

	t.Run("a claimer's longer lease does not stretch it", func(t *testing.T) {
		srv := redistest.Start(t)
		owner := newStore(t, backend{client: srv.Client(t)}, Options{Lease: time.Second})
		next := newStore(t, backend{client: srv.Client(t)}, Options{Lease: 10 * time.Second})
		req := newReq(t)
		_, err := owner.Claim(ctx, req) // and then it crashes
		require.NoError(t, err)
		backend{}.expireLease(t, owner, req)
		c, err := next.Claim(ctx, req) // Redis has been up longer than the owner's lease
		require.NoError(t, err, "a crashed owner's key held after its lease")
		require.Equal(t, TookOver, c.Status)
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200}))
	})

	t.Run("a shorter retention does not remove it", func(t *testing.T) {
		srv := redistest.Start(t, redistest.Args("--appendonly", "yes", "--appendfsync", "always"))
		owner := newStore(t, backend{client: srv.Client(t)}, Options{Lease: 2 * time.Second, Retention: time.Hour})
		req := newReq(t)
		c, err := owner.Claim(ctx, req)
		require.NoError(t, err)
		srv.Kill()
		time.Sleep(2500 * time.Millisecond) // the lease runs out while Redis is down
		srv.Restart(t)
		next := newStore(t, backend{client: srv.Client(t)}, Options{Lease: 2 * time.Second, Retention: 10 * time.Second})
		var cerr error
		require.Eventually(t, func() bool { // until Redis answers the claim
			_, cerr = next.Claim(ctx, req)
			return cerr == nil || errors.Is(cerr, ErrInProgress)
		}, 10*time.Second, 10*time.Millisecond)
		require.ErrorIs(t, cerr, ErrInProgress, "taken over the moment Redis came back")
		var ip *InProgressError
		require.ErrorAs(t, cerr, &ip)
		require.LessOrEqual(t, ip.LeaseLeft, 2*time.Second, "a grace longer than a lease")
		require.NoError(t, c.Lease.Extend(ctx)) // the owner renews within it
	})
}
