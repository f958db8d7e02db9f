package script

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

// TestFastRefusal: with the hook, a command to a server that refuses
// connections fails with the refusal (a *Refused, errors.Is
// ECONNREFUSED), not after go-redis's dial retries: within a 1s deadline
// that those retries (at least 1.6s of fixed sleeps) would outlast, so
// never with the deadline's error. The hook is added once per client.
func TestFastRefusal(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	FastRefusal(c)
	FastRefusal(c)
	_, ok := hooked.Load(weak.Make(c))
	require.True(t, ok)
	require.NoError(t, c.Ping(context.Background()).Err())
	srv.Stop()
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		require.ErrorIs(t, err, syscall.ECONNREFUSED, "ping %d", i)
		require.NotErrorIs(t, err, context.DeadlineExceeded, "ping %d waited for its deadline", i)
		var r *Refused
		require.ErrorAs(t, err, &r)
		require.Contains(t, err.Error(), "connection refused")
	}
	srv.Restart(t)
	require.Eventually(t, func() bool { return c.Ping(context.Background()).Err() == nil }, 10*time.Second, 5*time.Millisecond)
}

// TestFastRefusalOnThePipeliner: the hook reaches an auto-pipeliner's
// connections too.
func TestFastRefusalOnThePipeliner(t *testing.T) {
	srv := redistest.Start(t)
	ap := redistest.AutoPipeliner(t, srv.Client(t))
	FastRefusal(ap)
	require.NoError(t, ap.Ping(context.Background()).Err())
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := ap.Ping(ctx).Err()
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.False(t, errors.Is(err, context.DeadlineExceeded), "waited for its deadline: %v", err)
	var _ redis.Hook = refusalHook{}
}
