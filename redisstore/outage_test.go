package redisstore

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

// TestRefusedConnectionFailsFast: once Redis refuses connections, every
// claim fails with that refusal as its cause (errors.Is ECONNREFUSED), the
// first after the stop included, on the plain client (with and without
// ContextTimeoutEnabled) and on the auto-pipeliner: none waits for its
// deadline, which is 1s here, shorter than go-redis's dial retries (at
// least 1.6s of fixed 100ms sleeps, which the first claim used to wait out,
// or on the pipeliner its whole deadline, with only "context deadline
// exceeded" to show) and the promise (a refusal answers well under a
// second; the refusal path takes milliseconds, over 4x within it). The
// claims after the first fail at once on the store's outage; the store
// logs the refusal, and serves again as soon as Redis accepts connections.
func TestRefusedConnectionFailsFast(t *testing.T) {
	const timeout = time.Second
	for _, mode := range []string{"client", "client with ContextTimeoutEnabled", "pipelined"} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.Start(t)
			opts := srv.Options()
			opts.ContextTimeoutEnabled = mode == "client with ContextTimeoutEnabled"
			opts.ReadTimeout, opts.WriteTimeout = 2*time.Second, 2*time.Second // as the README's quick start
			c := redis.NewClient(opts)
			t.Cleanup(func() { _ = c.Close() })
			var client redis.UniversalClient = c
			if mode == "pipelined" {
				client = autoPipeliner(t, c)
			}
			var log logBuffer
			s := newStore(t, backend{client: client}, Options{Logger: log.logger()})
			ctx := context.Background()
			warm, err := s.Claim(ctx, newReq(t))
			require.NoError(t, err)
			require.NoError(t, warm.Lease.Complete(ctx, Response{Code: 200}))
			settled(t, s) // behind the pipeliner, the start-up check says it is one server

			srv.Stop()
			for i := range 20 {
				cctx, cancel := context.WithTimeout(ctx, timeout)
				start := time.Now()
				_, err := s.Claim(cctx, newReq(t))
				cancel()
				if i == 0 {
					t.Logf("%s: the first claim after the stop failed in %v", mode, time.Since(start)) // reported, not asserted
				}
				require.ErrorIs(t, err, syscall.ECONNREFUSED, "claim %d: not the refusal", i)
				require.NotErrorIs(t, err, context.DeadlineExceeded, "claim %d waited for its deadline", i)
				if i > 0 {
					require.Contains(t, err.Error(), "Redis refuses connections", "claim %d went to Redis during the outage", i)
				}
			}
			require.Contains(t, log.String(), "level=ERROR")
			require.Contains(t, log.String(), "connection refused")

			// Back: the probe sees it, and claims go to Redis again.
			srv.Restart(t)
			require.Eventually(t, func() bool {
				c, err := s.Claim(ctx, newReq(t))
				if err != nil {
					return false
				}
				return c.Lease.Release(ctx) == nil
			}, 10*time.Second, 10*time.Millisecond)
			require.Contains(t, log.String(), "Redis answers again")
		})
	}
}

// TestRefusalOnAClusterStaysLocal: on a cluster, one master's refusal says
// nothing about the others: claims of keys on them go on.
//
// The cluster serves the live masters' slots after it has seen one fail
// (cluster-require-full-coverage no): with the default, every master answers
// CLUSTERDOWN once cluster-node-timeout (2s here) passes, and on a slow
// machine all the claims came after that (the test was flaky under load).
func TestRefusalOnAClusterStaysLocal(t *testing.T) {
	t.Parallel() // a cluster of its own; the refusal's cause is asserted, not its time
	cl := redistest.StartCluster(t, 3, redistest.NoFullCoverage())
	var log logBuffer
	s := newStore(t, backend{client: cl.Client(t)}, Options{Logger: log.logger()})
	ctx := context.Background()
	for i := range 3 { // a claim on every master, while all are up
		_, err := s.Claim(ctx, newReq(t))
		require.NoError(t, err, i)
	}
	cl.Node(1).Kill()
	ok, refused := 0, 0
	for range 12 {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := s.Claim(cctx, newReq(t))
		cancel()
		switch {
		case err == nil:
			ok++
		case errors.Is(err, syscall.ECONNREFUSED), strings.Contains(err.Error(), "refused"):
			refused++
		}
	}
	require.Positive(t, ok, "claims on the live masters failed too")
	require.NoError(t, s.out.Refusal(), "a cluster is never in a store-wide outage")
	t.Logf("with one master of three killed: %d claims ok, %d refused", ok, refused)
}
