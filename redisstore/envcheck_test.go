package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

// failChecks is a client hook that, while on, fails the start-up check's
// commands (CONFIG, INFO) as an unreachable server would, without
// touching the scripts: the check reaches no master, claims work.
type failChecks struct{ on atomic.Bool }

var errCheckUnreachable = errors.New("i/o timeout (the check's server is not reached)")

func (h *failChecks) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failChecks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); h.on.Load() && (n == "config" || n == "info") {
			cmd.SetErr(errCheckUnreachable)
			return errCheckUnreachable
		}
		return next(ctx, cmd)
	}
}
func (h *failChecks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRequireNoEvictionFailsClosedUntilChecked: with RequireNoEviction, a
// start-up check that reaches no master is no verdict: claims are refused
// (ErrEvicting, saying the policy could not be checked) until a check
// reaches every master. They used to pass while the check retried, on a
// Redis that may have been evicting.
func TestRequireNoEvictionFailsClosedUntilChecked(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	fail := &failChecks{}
	fail.on.Store(true)
	client.AddHook(fail)
	var log logBuffer
	s := newStore(t, backend{client: client}, Options{RequireNoEviction: true, Logger: log.logger()})
	ctx := context.Background()
	req := newReq(t)
	_, err := s.Claim(ctx, req)
	require.ErrorIs(t, err, ErrEvicting, "a claim passed on an unchecked Redis")
	require.Contains(t, err.Error(), "could not be checked")
	_, err = s.Lookup(ctx, req.Scope, req.Key)
	require.ErrorIs(t, err, ErrNotFound, "a refused claim wrote nothing")

	fail.on.Store(false)
	s.env.Due() // the retry's while has passed
	c, err := s.Claim(ctx, req)
	require.NoError(t, err)
	require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200}))
}

// TestEvictionSwitchIsNoticed: a Redis switched to an evicting policy after
// a good start-up check is noticed by the next scheduled check (every
// minute; the test makes it due): logged as an error, and, with
// RequireNoEviction, claims are refused from then on. The first good check
// used to be the last.
func TestEvictionSwitchIsNoticed(t *testing.T) {
	for _, require_ := range []bool{false, true} {
		t.Run(map[bool]string{false: "logged", true: "RequireNoEviction refuses"}[require_], func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			var log logBuffer
			s := newStore(t, backend{client: srv.Client(t)}, Options{RequireNoEviction: require_, Logger: log.logger()})
			ctx := context.Background()
			c, err := s.Claim(ctx, newReq(t))
			require.NoError(t, err)
			require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200}))
			settled(t, s)
			require.NotContains(t, log.String(), "maxmemory-policy")

			require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "100mb").Err())
			require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
			s.env.Due() // a minute has passed
			require.Eventually(t, func() bool {
				_, err := s.Claim(ctx, newReq(t))
				if require_ {
					return errors.Is(err, ErrEvicting)
				}
				require.NoError(t, err)
				return strings.Contains(log.String(), "level=ERROR")
			}, 10*time.Second, 5*time.Millisecond, "the switch was not noticed: %s", log.String())
			require.Contains(t, log.String(), "allkeys-lru")
		})
	}
}

// TestNoPersistenceIsFoundOnFirstUse: the start-up check looks at
// persistence too. A Redis with neither AOF nor RDB is logged as a warning
// that names the consequence (a restart forgets every record, and retries
// after it run again); with RequirePersistence the store refuses to serve
// (ErrNoPersistence) until AOF or RDB is on. The check used to look at
// eviction only: killing such a Redis mid-storm ran 171 of 600 checkouts
// twice and the service never said so.
func TestNoPersistenceIsFoundOnFirstUse(t *testing.T) {
	ctx := context.Background()
	t.Run("warned, and served", func(t *testing.T) {
		var log logBuffer
		s := newStore(t, realBackend(t), Options{Logger: log.logger()}) // redistest: --save "" --appendonly no
		c, err := s.Claim(ctx, newReq(t))
		require.NoError(t, err)
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200}))
		settled(t, s)
		require.Contains(t, log.String(), "level=WARN")
		require.Contains(t, log.String(), "persistence: neither AOF nor RDB: a restart forgets every record, and retries after it run again")
	})

	t.Run("RequirePersistence refuses, until AOF is on", func(t *testing.T) {
		srv := redistest.Start(t)
		admin := srv.Client(t)
		for name, client := range map[string]redis.UniversalClient{"client": srv.Client(t), "pipelined": autoPipeliner(t, srv.Client(t))} {
			t.Run(name, func(t *testing.T) {
				var log logBuffer
				s := newStore(t, backend{client: client}, Options{RequirePersistence: true, Logger: log.logger()})
				req := newReq(t)
				_, err := s.Claim(ctx, req)
				require.ErrorIs(t, err, ErrNoPersistence)
				require.NotErrorIs(t, err, ErrEvicting)
				_, err = s.Lookup(ctx, req.Scope, req.Key)
				require.ErrorIs(t, err, ErrNotFound, "a refused claim wrote nothing")
				require.Contains(t, log.String(), "level=ERROR")
				require.Contains(t, log.String(), "claims are refused (Options.RequirePersistence)")

				require.NoError(t, admin.ConfigSet(ctx, "appendonly", "yes").Err())
				t.Cleanup(func() { _ = admin.ConfigSet(ctx, "appendonly", "no").Err() })
				s.env.Due() // the refusal's recheck is due
				c, err := s.Claim(ctx, req)
				require.NoError(t, err)
				require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200}))
				require.Contains(t, log.String(), "claims are served")
			})
		}
	})

	t.Run("RDB snapshots are persistence", func(t *testing.T) {
		var log logBuffer
		srv := redistest.Start(t, redistest.Args("--save", "3600 1"))
		s := newStore(t, backend{client: srv.Client(t)}, Options{RequirePersistence: true, RequireNoEviction: true, Logger: log.logger()})
		c, err := s.Claim(ctx, newReq(t))
		require.NoError(t, err)
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200}))
		settled(t, s)
		require.Empty(t, log.String())
	})

	t.Run("CONFIG disabled: INFO persistence", func(t *testing.T) {
		for _, aof := range []string{"yes", "no"} {
			var log logBuffer
			srv := redistest.Start(t, redistest.Args("--appendonly", aof, "--rename-command", "CONFIG", ""))
			s := newStore(t, backend{client: srv.Client(t)}, Options{RequirePersistence: true, Logger: log.logger()})
			c, err := s.Claim(ctx, newReq(t))
			require.NoError(t, err, "AOF %s: the RDB schedule cannot be read: warned, and served", aof)
			require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200}))
			settled(t, s)
			if aof == "yes" {
				require.NotContains(t, log.String(), "persistence")
			} else {
				require.Contains(t, log.String(), "level=WARN")
				require.Contains(t, log.String(), "the RDB schedule cannot be read")
			}
		}
	})

	t.Run("NoStartupCheck: nothing checked, nothing logged", func(t *testing.T) {
		var log logBuffer
		s := newStore(t, miniBackend(t), Options{NoStartupCheck: true, Logger: log.logger()})
		c, err := s.Claim(ctx, newReq(t))
		require.NoError(t, err)
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200}))
		require.True(t, s.env.Settled())
		require.Empty(t, log.String(), "miniredis evicts nothing and persists nothing by design")
		for _, opts := range []Options{{NoStartupCheck: true, RequireNoEviction: true}, {NoStartupCheck: true, RequirePersistence: true}} {
			_, err := New(redis.NewClient(&redis.Options{}), opts)
			require.ErrorContains(t, err, "NoStartupCheck")
		}
	})
}

// TestVanishedRecordIsLogged: a completion or checkpoint that finds its
// record gone fails with ErrVanished (and ErrLeaseLost), and the store logs
// that the record vanished, with the likely cause that Redis tells: a
// restart (a Redis without persistence forgets every record), else a
// deletion or a flush. Nothing used to be said: the write was fenced like
// one that lost its lease to another attempt.
func TestVanishedRecordIsLogged(t *testing.T) {
	ctx := context.Background()
	wait := func(t *testing.T, s *Store) {
		require.Eventually(t, func() bool { return !s.env.VanishBusy() }, 10*time.Second, time.Millisecond)
	}
	t.Run("flushed: complete", func(t *testing.T) {
		srv := redistest.Start(t)
		var log logBuffer
		s := newStore(t, backend{client: srv.Client(t)}, Options{Logger: log.logger()})
		c, err := s.Claim(ctx, newReq(t))
		require.NoError(t, err)
		require.NoError(t, srv.Client(t).FlushAll(ctx).Err())
		err = c.Lease.Complete(ctx, Response{Code: 201, Body: []byte("charged")})
		require.ErrorIs(t, err, ErrVanished)
		require.ErrorIs(t, err, ErrLeaseLost)
		wait(t, s)
		require.Contains(t, log.String(), `level=ERROR msg="redisstore: a record vanished while its owner held it (deleted or flushed)`)
		require.Contains(t, log.String(), "op=complete")
	})
	t.Run("Redis restarted without persistence: checkpoint", func(t *testing.T) {
		srv := redistest.Start(t) // --save "" --appendonly no
		var log logBuffer
		// A 30s lease: no heartbeat (a sign of life) before the checkpoint.
		s := newStore(t, backend{client: srv.Client(t)}, Options{Logger: log.logger(), Lease: 30 * time.Second})
		c, err := s.Claim(ctx, newReq(t))
		require.NoError(t, err)
		settled(t, s) // the check knows the server's run_id
		// The restart comes more than a second after the owner's last sign
		// of life (the claim), so that INFO's uptime, in whole seconds, tells
		// it: a check that runs after the restart (one may, on a reconnect)
		// learns the new run_id, which then no longer tells it. Without this
		// wait .ci/run once logged "deleted or flushed".
		time.Sleep(1100 * time.Millisecond)
		srv.Restart(t)
		var cerr error
		require.Eventually(t, func() bool { // the first calls find the old connections closed
			cerr = c.Lease.Checkpoint(ctx, "charged", []byte("ch_1"))
			return errors.Is(cerr, ErrLeaseLost)
		}, 10*time.Second, 10*time.Millisecond)
		require.ErrorIs(t, cerr, ErrVanished)
		wait(t, s)
		require.Contains(t, log.String(), "a record vanished while its owner held it (Redis restarted)")
		require.Contains(t, log.String(), "op=checkpoint")
		require.Contains(t, log.String(), "without persistence")
	})
	t.Run("another owner took it: not vanished", func(t *testing.T) {
		var log logBuffer
		b := realBackend(t)
		s := newStore(t, b, Options{Logger: log.logger()})
		c, err := s.Claim(ctx, newReq(t))
		require.NoError(t, err)
		steal(t, b.client, c.Lease)
		err = c.Lease.Complete(ctx, Response{Code: 201})
		require.ErrorIs(t, err, ErrLeaseLost)
		require.NotErrorIs(t, err, ErrVanished)
		require.False(t, s.env.VanishBusy())
		require.NotContains(t, log.String(), "vanished")
	})
}
