package check

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

// configCalls counts CONFIG commands: one check sends three per master.
type configCalls struct{ n atomic.Int64 }

func (h *configCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *configCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "config" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *configCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestStartupRechecksEveryMinute: after a good verdict the next check is
// due a minute later, on a claim (Ready): not before, and once then, with
// claims passing meanwhile. Time is the test's (Startup.Now).
func TestStartupRechecksEveryMinute(t *testing.T) {
	srv := redistest.Start(t, redistest.Args("--appendonly", "yes"))
	client := srv.Client(t)
	calls := &configCalls{}
	client.AddHook(calls)
	var now atomic.Int64
	s := &Startup{Client: client, RequireNoEviction: true, RequirePersistence: true, Logger: slog.New(slog.DiscardHandler),
		Evicting: errors.New("evicting"), NoPersistence: errors.New("no persistence"),
		Now: func() time.Duration { return time.Duration(now.Load()) }}
	ctx := context.Background()
	require.NoError(t, s.Ready(ctx), "the first claim waits for the verdict")
	require.True(t, s.Settled())
	perCheck := calls.n.Load()
	require.Positive(t, perCheck)

	now.Store(int64(startupEvery - time.Second))
	require.NoError(t, s.Ready(ctx))
	require.True(t, s.Settled(), "no check before the minute")
	require.Equal(t, perCheck, calls.n.Load())

	now.Store(int64(startupEvery))
	require.NoError(t, s.Ready(ctx), "a good verdict lets claims pass while the next check runs")
	require.Eventually(t, s.Settled, 10*time.Second, time.Millisecond)
	require.Equal(t, 2*perCheck, calls.n.Load(), "one check at the minute")
	require.NoError(t, s.Ready(ctx))
	require.Equal(t, 2*perCheck, calls.n.Load(), "and the next a minute after it")
}
