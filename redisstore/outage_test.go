package redisstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

// TestRefusedConnectionFailsFast: once the store has seen Redis refuse a
// connection, claims fail at once with that refusal as their cause, instead
// of each waiting out the client's dial retries (~1.7s) or, on the
// auto-pipeliner, its whole deadline with only "context deadline exceeded"
// to show; the store logs the refusal, and serves again as soon as Redis
// accepts connections. On the plain client, the claim that finds the
// refusal waits out the client's retries; on the pipeliner, the claims
// until its late answer come back (one deadline or two).
func TestRefusedConnectionFailsFast(t *testing.T) {
	const timeout = 2 * time.Second // the middleware's default Timeout
	for _, mode := range []string{"client", "client with ContextTimeoutEnabled", "pipelined"} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.Start(t)
			opts := srv.Options()
			opts.ContextTimeoutEnabled = mode == "client with ContextTimeoutEnabled"
			opts.ReadTimeout, opts.WriteTimeout = timeout, timeout // as the README's quick start
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
			stopped := time.Now()
			claim := func() (time.Duration, error) {
				cctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				start := time.Now()
				_, err := s.Claim(cctx, newReq(t))
				return time.Since(start), err
			}
			// The claims that find the refusal out: on the plain client the
			// first, which waits out the client's retries; on the pipeliner
			// those until its late answer.
			maxSlow := 1
			if mode == "pipelined" {
				maxSlow = 3
			}
			var first []time.Duration
			for {
				d, err := claim()
				require.Error(t, err)
				first = append(first, d)
				if d < timeout/10 {
					break
				}
				require.LessOrEqual(t, len(first), maxSlow, "claims waited for the client's retries or their deadline: %v", first)
			}
			found := time.Since(stopped)
			var fast []time.Duration
			for range 20 {
				d, err := claim()
				require.ErrorIs(t, err, syscall.ECONNREFUSED, "not the refusal")
				require.Contains(t, err.Error(), "Redis refuses connections")
				require.NotErrorIs(t, err, context.DeadlineExceeded)
				fast = append(fast, d)
			}
			slices.Sort(fast)
			// Well below the Timeout; the ceiling holds at 4x slowdown.
			require.Less(t, fast[len(fast)-1], timeout/4, "claims after the refusal was found: %v", fast)
			require.Contains(t, log.String(), "level=ERROR")
			require.Contains(t, log.String(), "connection refused")
			t.Logf("%s: refusal found %v after the stop (claims before: %v); then 20 claims failed in p50 %v, max %v",
				mode, found.Round(time.Millisecond), first, fast[len(fast)/2], fast[len(fast)-1])

			// Back: the probe sees it, and claims go to Redis again.
			srv.Restart(t)
			back := time.Now()
			require.Eventually(t, func() bool {
				c, err := s.Claim(ctx, newReq(t))
				if err != nil {
					return false
				}
				return c.Lease.Release(ctx) == nil
			}, 10*time.Second, 10*time.Millisecond)
			t.Logf("%s: serving again %v after the restart", mode, time.Since(back).Round(time.Millisecond))
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
