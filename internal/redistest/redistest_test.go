package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestStartSetGet(t *testing.T) {
	s := redistest.Start(t)
	require.True(t, s.Running())
	require.NotEqual(t, 6379, s.Port())
	require.Equal(t, fmt.Sprintf("127.0.0.1:%d", s.Port()), s.Addr())

	c := s.Client(t)
	ctx := ctxT(t, 5*time.Second)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	v, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	require.Equal(t, "v", v)

	save, err := c.ConfigGet(ctx, "save").Result()
	require.NoError(t, err)
	require.Equal(t, "", save["save"])
}

func TestArgs(t *testing.T) {
	s := redistest.Start(t, redistest.Args("--appendonly", "yes"))
	cfg, err := s.Client(t).ConfigGet(ctxT(t, 5*time.Second), "appendonly").Result()
	require.NoError(t, err)
	require.Equal(t, "yes", cfg["appendonly"])
}

func TestKillRestart(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := ctxT(t, 10*time.Second)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())

	s.Kill()
	s.Kill() // idempotent
	require.False(t, s.Running())
	require.Error(t, c.Get(ctxT(t, 500*time.Millisecond), "k").Err())

	port := s.Port()
	s.Restart(t)
	require.True(t, s.Running())
	require.Equal(t, port, s.Port())
	require.ErrorIs(t, c.Get(ctx, "k").Err(), redis.Nil, "no persistence: data must be gone")
	require.NoError(t, c.Set(ctx, "k", "v2", 0).Err())

	s.Stop()
	s.Stop() // idempotent
	require.False(t, s.Running())
	s.Restart(t)
	require.NoError(t, c.Ping(ctx).Err())
}

func TestPauseResume(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	require.NoError(t, c.Ping(ctxT(t, 5*time.Second)).Err())

	s.Pause()
	require.True(t, s.Running())
	// A paused server holds the PING until its deadline: the error is the
	// deadline's (not a refusal, not a reply).
	err := c.Ping(ctxT(t, 200*time.Millisecond)).Err()
	require.Error(t, err)
	require.True(t, errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded),
		"want a deadline error, got %v", err)

	s.Resume()
	require.NoError(t, c.Set(ctxT(t, 5*time.Second), "k", "v", 0).Err())
}

func TestKillWhilePaused(t *testing.T) {
	s := redistest.Start(t)
	s.Pause()
	s.Kill()
	require.False(t, s.Running())
	s.Restart(t)
	require.NoError(t, s.Client(t).Ping(ctxT(t, 5*time.Second)).Err())
}

func TestCluster(t *testing.T) {
	t.Parallel() // mostly waiting: gossip, failovers
	cl := redistest.StartCluster(t, 3)
	require.Equal(t, 3, cl.Masters())
	require.Len(t, cl.Addrs(), 3)

	c := cl.Client(t)
	ctx := ctxT(t, 20*time.Second)
	for i := range 300 {
		require.NoError(t, c.Set(ctx, fmt.Sprintf("key:%d", i), i, 0).Err())
	}
	for i := range cl.Masters() {
		n, err := cl.Node(i).Client(t).DBSize(ctx).Result()
		require.NoError(t, err)
		require.Positive(t, n, "master %d (%s) holds no keys", i, cl.Node(i).Addr())
	}

	a, err := c.ClusterKeySlot(ctx, "{x}a").Result()
	require.NoError(t, err)
	b, err := c.ClusterKeySlot(ctx, "{x}b").Result()
	require.NoError(t, err)
	require.Equal(t, a, b)
}

func TestClusterNoFullCoverage(t *testing.T) {
	t.Parallel() // mostly waiting: gossip, failovers
	cl := redistest.StartCluster(t, 3, redistest.NoFullCoverage())
	ctx := ctxT(t, 20*time.Second)
	cfg, err := cl.Node(0).Client(t).ConfigGet(ctx, "cluster-require-full-coverage").Result()
	require.NoError(t, err)
	require.Equal(t, "no", cfg["cluster-require-full-coverage"])
}
