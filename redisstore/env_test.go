package redisstore

import (
	"context"
	"github.com/idemkey/idemkey/internal/syncbuf"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

// logBuffer is a logger's output, safe for concurrent use.
type logBuffer struct{ syncbuf.Buffer }

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// settled waits until s's start-up check has nothing more to do.
func settled(t *testing.T, s *Store) {
	t.Helper()
	require.Eventually(t, s.env.Settled, 10*time.Second, 5*time.Millisecond, "the start-up check did not settle")
}

// TestEvictingRedisIsFoundOnFirstUse: the store checks maxmemory-policy on
// its first claim, without holding that claim up, and logs an error naming
// it when Redis may evict records; with RequireNoEviction it refuses to
// serve instead (ErrEvicting), and serves again once the policy is fixed.
// It reads the policy with CONFIG GET, or INFO memory where CONFIG is
// disabled, on every master of a cluster, and through an auto-pipeliner.
// The store used to say nothing: the first sign was a duplicate.
func TestEvictingRedisIsFoundOnFirstUse(t *testing.T) {
	t.Parallel() // its own servers; mostly waiting on cluster gossip and failovers
	ctx := context.Background()
	evicting := redistest.Args("--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")

	t.Run("logged, and served", func(t *testing.T) {
		srv := redistest.Start(t, evicting)
		var log logBuffer
		s := newStore(t, backend{client: srv.Client(t)}, Options{Logger: log.logger()})
		c, err := s.Claim(ctx, newReq(t))
		require.NoError(t, err)
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200}))
		require.Eventually(t, func() bool { return strings.Contains(log.String(), "level=ERROR") }, 10*time.Second, 5*time.Millisecond)
		require.Contains(t, log.String(), "maxmemory-policy")
		require.Contains(t, log.String(), "allkeys-lru with maxmemory 100.0 MiB")
		for range 3 {
			_, err := s.Claim(ctx, newReq(t))
			require.NoError(t, err)
		}
		settled(t, s)
		require.Equal(t, 1, strings.Count(log.String(), "redisstore: maxmemory-policy:"), "logged once: %s", log.String())
	})

	t.Run("RequireNoEviction refuses, until the policy is fixed", func(t *testing.T) {
		srv := redistest.Start(t, evicting)
		admin := srv.Client(t)
		for name, client := range map[string]redis.UniversalClient{"client": srv.Client(t), "pipelined": autoPipeliner(t, srv.Client(t))} {
			t.Run(name, func(t *testing.T) {
				var log logBuffer
				s := newStore(t, backend{client: client}, Options{RequireNoEviction: true, Logger: log.logger()})
				req := newReq(t)
				_, err := s.Claim(ctx, req)
				require.ErrorIs(t, err, ErrEvicting)
				require.Contains(t, err.Error(), "allkeys-lru")
				_, err = s.Lookup(ctx, req.Scope, req.Key)
				require.ErrorIs(t, err, ErrNotFound, "a refused claim wrote nothing")
				require.Contains(t, log.String(), "claims are refused (Options.RequireNoEviction)")

				require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
				t.Cleanup(func() { _ = admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err() })
				_, err = s.Claim(ctx, req)
				require.ErrorIs(t, err, ErrEvicting, "checked again only after a while")
				s.env.Due() // that while has passed
				c, err := s.Claim(ctx, req)
				require.NoError(t, err)
				require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200}))
				settled(t, s)
			})
		}
	})

	t.Run("CONFIG disabled: INFO memory", func(t *testing.T) {
		srv := redistest.Start(t, evicting, redistest.Args("--rename-command", "CONFIG", ""))
		require.Error(t, srv.Client(t).ConfigGet(ctx, "maxmemory").Err(), "CONFIG is disabled")
		var log logBuffer
		s := newStore(t, backend{client: srv.Client(t)}, Options{RequireNoEviction: true, Logger: log.logger()})
		_, err := s.Claim(ctx, newReq(t))
		require.ErrorIs(t, err, ErrEvicting)
		require.Contains(t, log.String(), "allkeys-lru")
	})

	t.Run("cluster: every master", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		one := cl.Node(2).Client(t) // one master of three evicts
		require.NoError(t, one.ConfigSet(ctx, "maxmemory", "100mb").Err())
		require.NoError(t, one.ConfigSet(ctx, "maxmemory-policy", "volatile-ttl").Err())
		var log logBuffer
		s := newStore(t, backend{client: cl.Client(t)}, Options{RequireNoEviction: true, Logger: log.logger()})
		_, err := s.Claim(ctx, newReq(t))
		require.ErrorIs(t, err, ErrEvicting)
		require.Contains(t, err.Error(), "volatile-ttl")
	})

	t.Run("noeviction: nothing to say", func(t *testing.T) {
		var log logBuffer
		srv := redistest.Start(t, redistest.Args("--appendonly", "yes")) // nor about persistence
		s := newStore(t, backend{client: srv.Client(t)}, Options{RequireNoEviction: true, Logger: log.logger()})
		c, err := s.Claim(ctx, newReq(t))
		require.NoError(t, err)
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200}))
		settled(t, s)
		require.Empty(t, log.String())
	})

	t.Run("cannot be checked: warned, and served", func(t *testing.T) {
		var log logBuffer
		s := newStore(t, miniBackend(t), Options{RequireNoEviction: true, Logger: log.logger()}) // miniredis answers neither
		c, err := s.Claim(ctx, newReq(t))
		require.NoError(t, err)
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200}))
		settled(t, s)
		require.Contains(t, log.String(), "level=WARN")
		require.Contains(t, log.String(), "cannot read maxmemory-policy")
	})
}
