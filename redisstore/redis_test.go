package redisstore

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore/internal/record"
)

// Tests here need a real redis-server: cluster slots, command counts, faults.

func TestClusterSpreadsKeysOverAllMasters(t *testing.T) {
	t.Parallel() // its own servers; mostly waiting on cluster gossip and failovers
	cl := redistest.StartCluster(t, 3)
	s := newStore(t, backend{client: cl.Client(t)}, Options{})
	ctx := context.Background()
	for i := range 300 {
		req := Request{Scope: "acct", Key: "k" + strconv.Itoa(i), Fingerprint: "f"}
		c, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.NoError(t, c.Lease.Checkpoint(ctx, "p", nil))
		if i%2 == 0 {
			require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200}))
		}
		keys := s.keys(req.Scope, req.Key)
		node := cl.Node(0).Client(t)
		s0, err := node.ClusterKeySlot(ctx, keys.Record()).Result()
		require.NoError(t, err)
		for _, k := range []string{keys.Tombstone(), keys.LegacyLease()} {
			s1, err := node.ClusterKeySlot(ctx, k).Result()
			require.NoError(t, err)
			require.Equal(t, s0, s1, "a record's keys must share a slot")
		}
	}
	for i := range cl.Masters() {
		n, err := cl.Node(i).Client(t).DBSize(ctx).Result()
		require.NoError(t, err)
		require.Greater(t, n, int64(50), "master %d holds too few of the 300 records", i)
	}
}

// counter counts the commands a client sends: with no pipelines, one command
// is one round trip.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// evalsha returns the server's count of EVALSHA and EVAL calls.
func evalCalls(t *testing.T, c *redis.Client) (evalsha, eval int) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		switch name {
		case "cmdstat_evalsha":
			evalsha = n
		case "cmdstat_eval":
			eval = n
		}
	}
	return evalsha, eval
}

func TestRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	client := srv.Client(t)
	cnt := &counter{}
	client.AddHook(cnt)
	s := newStore(t, backend{client: client}, Options{})
	ctx := context.Background()

	// Warm the script cache: the very first run of each script costs an extra
	// EVAL after NOSCRIPT, once per server.
	warm, err := s.Claim(ctx, Request{Key: "warm-up"})
	require.NoError(t, err)
	require.NoError(t, warm.Lease.Complete(ctx, Response{}))
	settled(t, s) // the start-up check's commands are not the ones measured

	measure := func(name string, want int, f func()) {
		t.Helper()
		sha0, eval0 := evalCalls(t, admin)
		cnt.n.Store(0)
		f()
		sha1, eval1 := evalCalls(t, admin)
		require.Equal(t, want, int(cnt.n.Load()), "%s: client round trips", name)
		require.Equal(t, want, sha1-sha0, "%s: EVALSHA calls on the server", name)
		require.Zero(t, eval1-eval0, "%s: EVAL calls on the server", name)
	}
	req := Request{Scope: "a", Key: "k", Fingerprint: "f"}
	measure("first execution", 2, func() {
		c, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 201, Body: []byte("x")}))
	})
	measure("replay", 1, func() {
		c, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, Replayed, c.Status)
	})
	measure("mismatch", 1, func() {
		_, err := s.Claim(ctx, Request{Scope: "a", Key: "k", Fingerprint: "g"})
		require.ErrorIs(t, err, ErrMismatch)
	})
	busy := Request{Scope: "a", Key: "busy"}
	other := newStore(t, backend{client: admin}, Options{}) // another process
	_, err = other.Claim(ctx, busy)
	require.NoError(t, err)
	measure("in progress", 1, func() {
		_, err := s.Claim(ctx, busy)
		require.ErrorIs(t, err, ErrInProgress)
	})
	mine := Request{Scope: "a", Key: "mine"}
	_, err = s.Claim(ctx, mine)
	require.NoError(t, err)
	measure("in progress in the process that runs it", 0, func() {
		_, err := s.Claim(ctx, mine)
		require.ErrorIs(t, err, ErrInProgress)
	})
	measure("Do, first execution", 2, func() {
		_, err := s.Do(ctx, Request{Key: "do"}, func(context.Context, *Lease) ([]byte, error) { return []byte("r"), nil })
		require.NoError(t, err)
	})
	measure("Do, replay", 1, func() {
		res, err := s.Do(ctx, Request{Key: "do"}, func(context.Context, *Lease) ([]byte, error) { panic("no") })
		require.NoError(t, err)
		require.True(t, res.Replayed)
	})
}

func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, backend{client: srv.Client(t)}, Options{})
	ctx := context.Background()
	c, err := s.Claim(ctx, Request{Key: "before"})
	require.NoError(t, err)

	srv.Kill()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = s.Claim(cctx, Request{Key: "during"})
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrInProgress)
	require.Contains(t, err.Error(), "redisstore: claim:")
	require.Error(t, c.Lease.Complete(cctx, Response{}))
	require.NotErrorIs(t, c.Lease.Complete(cctx, Response{}), ErrLeaseLost)
	_, err = s.Do(cctx, Request{Key: "do"}, func(context.Context, *Lease) ([]byte, error) { panic("must not run") })
	require.Error(t, err)

	// Back, empty (no persistence): service resumes with the same client.
	srv.Restart(t)
	require.Eventually(t, func() bool {
		c, err := s.Claim(ctx, Request{Key: "after"})
		return err == nil && c.Status == Claimed
	}, 10*time.Second, 10*time.Millisecond)
}

func TestHungRedisHonoursDeadline(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, backend{client: srv.Client(t)}, Options{})
	ctx := context.Background()
	_, err := s.Claim(ctx, Request{Key: "warm"})
	require.NoError(t, err)

	srv.Pause()
	defer srv.Resume()
	const deadline = 300 * time.Millisecond
	cctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	start := time.Now()
	_, err = s.Claim(cctx, Request{Key: "hung"})
	took := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// The bound is the behaviour: the deadline ends a claim on a paused
	// Redis (which would hold it until Resume); 4x what a loaded race
	// build takes, the deadline and a second.
	require.Less(t, took, 4*(deadline+time.Second), "claim hung past its deadline")
}

func TestScriptErrorsSurface(t *testing.T) {
	for name, b := range map[string]backend{"redis": realBackend(t), "miniredis": miniBackend(t)} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t, b, Options{})
			ctx := context.Background()
			// Something else wrote a list where the record lives.
			req := Request{Key: "clobbered"}
			require.NoError(t, b.client.RPush(ctx, s.keys(req.Scope, req.Key).Record(), "x").Err())
			_, err := s.Claim(ctx, req)
			require.Error(t, err)
			require.Contains(t, err.Error(), "redisstore: claim:")
			require.Contains(t, err.Error(), "WRONGTYPE")
			_, err = s.Lookup(ctx, req.Scope, req.Key)
			require.Error(t, err)

			// Or a string that is not a record.
			req = Request{Key: "clobbered-string"}
			require.NoError(t, b.client.Set(ctx, s.keys(req.Scope, req.Key).Record(), "x", time.Minute).Err())
			_, err = s.Claim(ctx, req)
			require.ErrorIs(t, err, ErrUnexpectedReply)
			_, err = s.Lookup(ctx, req.Scope, req.Key)
			require.ErrorIs(t, err, ErrUnexpectedReply)
		})
	}
}

// TestClaimIsIdempotentPerToken covers a claim whose reply was lost and is
// sent again (a client-side retry): the same token gets the same answer
// instead of being told it is in progress behind itself.
func TestClaimIsIdempotentPerToken(t *testing.T) {
	for name, b := range map[string]backend{"redis": realBackend(t), "miniredis": miniBackend(t)} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t, b, Options{})
			ctx := context.Background()
			keys := []string{s.keys("", "k").Record()}
			fp := record.Fingerprint("fp")
			rec := record.AppendStarted(nil, &fp, "tok-0001", s.ret.Threshold, &record.Started{Attempt: 1, Label: "l"})
			run := func() record.ClaimReply {
				reply, err := claimScript.Run(ctx, b.client, keys, rec, s.ret.MS).Result()
				require.NoError(t, err)
				c, ok := record.DecodeClaim(reply)
				require.True(t, ok, "%#v", reply)
				return c
			}
			first, again := run(), run()
			require.Equal(t, int64(record.Owned), first.Status)
			require.Equal(t, 1, first.Attempt)
			require.Equal(t, int64(record.Owned), again.Status, "the same token is told it owns the key again")
			require.Equal(t, 1, again.Attempt)
		})
	}
}
