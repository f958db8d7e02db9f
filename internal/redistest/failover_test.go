package redistest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

// role returns the role line of INFO replication on s ("master", "slave").
func role(t *testing.T, ctx context.Context, s *redistest.Server) string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	r, err := c.Do(ctx, "ROLE").Slice()
	require.NoError(t, err)
	return r[0].(string)
}

// TestSentinel starts the deployment, checks its shape, fails it over twice
// (SENTINEL FAILOVER, then a master kill), and checks that one failover
// client keeps reading and writing across both without being rebuilt.
func TestSentinel(t *testing.T) {
	t.Parallel() // mostly waiting: gossip, failovers
	start := time.Now()
	s := redistest.StartSentinel(t)
	t.Logf("sentinel deployment started in %v", time.Since(start))
	ctx := ctxT(t, 90*time.Second)

	require.Equal(t, 3, s.Nodes())
	require.Len(t, s.SentinelAddrs(), 3)
	m, err := s.Master(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, m)
	require.Equal(t, "master", role(t, ctx, s.Node(0)))
	require.Equal(t, "slave", role(t, ctx, s.Node(1)))
	require.Equal(t, "slave", role(t, ctx, s.Node(2)))

	c := s.Client(t)
	require.NoError(t, c.Set(ctx, "before", "1", 0).Err())
	require.NoError(t, s.WaitReplicas(ctx, 2))

	start = time.Now()
	promoted, err := s.Failover(ctx)
	require.NoError(t, err)
	t.Logf("SENTINEL FAILOVER: node %d promoted in %v", promoted, time.Since(start))
	require.NotEqual(t, 0, promoted)
	require.Equal(t, "master", role(t, ctx, s.Node(promoted)))
	m, err = s.Master(ctx)
	require.NoError(t, err)
	require.Equal(t, promoted, m)

	// The failover client finds the new master by itself: writes land there.
	// (Until it has switched, they may land on the old master, which takes
	// writes until the sentinels turn it into a replica.)
	pc := s.Node(promoted).Client(t)
	n := 0
	require.Eventually(t, func() bool {
		n++
		if c.Set(ctx, "after", n, 0).Err() != nil {
			return false
		}
		v, err := pc.Get(ctx, "after").Int()
		return err == nil && v == n
	}, 10*time.Second, 20*time.Millisecond)
	v, err := c.Get(ctx, "before").Result()
	require.NoError(t, err)
	require.Equal(t, "1", v, "the replicated write survived the failover")
	// The other replica follows the new master within the failover; the
	// old master only several seconds later.
	require.NoError(t, s.WaitReplicas(ctx, 1))

	start = time.Now()
	killed, promoted2, err := s.KillMaster(ctx)
	require.NoError(t, err)
	t.Logf("master kill: node %d promoted in %v", promoted2, time.Since(start))
	require.Equal(t, promoted, killed)
	require.NotEqual(t, killed, promoted2)
	require.False(t, s.Node(killed).Running())
	require.Eventually(t, func() bool { return c.Set(ctx, "after-kill", "3", 0).Err() == nil }, 10*time.Second, 20*time.Millisecond)
	v, err = c.Get(ctx, "before").Result()
	require.NoError(t, err)
	require.Equal(t, "1", v)
}

// TestClusterReplicas starts 3 masters with a replica each, then promotes the
// replica of master 0 with CLUSTER FAILOVER and that of master 1 by killing
// it; a cluster client keeps working across both.
func TestClusterReplicas(t *testing.T) {
	t.Parallel() // mostly waiting: gossip, failovers
	start := time.Now()
	cl := redistest.StartCluster(t, 3, redistest.Replicas(1), redistest.Args("--cluster-node-timeout", "1000"))
	t.Logf("3+3 cluster started in %v", time.Since(start))
	ctx := ctxT(t, 90*time.Second)
	require.Equal(t, 3, cl.Masters())
	require.Equal(t, 6, cl.Nodes())
	for i := range 3 {
		require.Equal(t, "master", role(t, ctx, cl.Node(i)))
		r, err := cl.ReplicasOf(ctx, i)
		require.NoError(t, err)
		require.Equal(t, []int{3 + i}, r)
		require.Equal(t, "slave", role(t, ctx, cl.Node(3+i)))
	}

	c := cl.Client(t)
	keys := make([]string, 30)
	for i := range keys {
		keys[i] = fmt.Sprintf("key:%d", i)
		require.NoError(t, c.Set(ctx, keys[i], i, 0).Err())
	}
	var k0 string // a key master 0 serves
	for _, k := range keys {
		if m, err := cl.MasterFor(ctx, k); err == nil && m == 0 {
			k0 = k
			break
		}
	}
	require.NotEmpty(t, k0)

	start = time.Now()
	promoted, err := cl.Failover(ctx, 0)
	require.NoError(t, err)
	t.Logf("CLUSTER FAILOVER: node %d promoted in %v", promoted, time.Since(start))
	require.Equal(t, 3, promoted)
	require.Equal(t, "master", role(t, ctx, cl.Node(3)))
	require.Equal(t, "slave", role(t, ctx, cl.Node(0)))
	m, err := cl.MasterFor(ctx, k0)
	require.NoError(t, err)
	require.Equal(t, 3, m)
	r, err := cl.ReplicasOf(ctx, 3)
	require.NoError(t, err)
	require.Equal(t, []int{0}, r)
	_, err = cl.Failover(ctx, 0)
	require.ErrorContains(t, err, "not a master")

	start = time.Now()
	promoted, err = cl.KillMaster(ctx, 1)
	require.NoError(t, err)
	t.Logf("master kill: node %d promoted in %v", promoted, time.Since(start))
	require.Equal(t, 4, promoted)
	require.False(t, cl.Node(1).Running())

	// Every key is still there, through the same client, once it has
	// followed the redirections.
	for i, k := range keys {
		require.Eventually(t, func() bool {
			v, err := c.Get(ctx, k).Int()
			return err == nil && v == i
		}, 10*time.Second, 20*time.Millisecond, "key %s", k)
	}

	// The killed master comes back as a replica of the node that replaced it.
	cl.Node(1).Restart(t)
	require.NoError(t, cl.WaitOK(ctx))
	require.Eventually(t, func() bool {
		r, err := cl.ReplicasOf(ctx, 4)
		return err == nil && len(r) == 1 && r[0] == 1
	}, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, "slave", role(t, ctx, cl.Node(1)))
}

// TestLaunchSentinel starts a deployment outside the test's control, as a
// benchmark program would, and closes it.
func TestLaunchSentinel(t *testing.T) {
	t.Parallel() // mostly waiting: gossip, failovers
	redistest.Binary(t)
	s, err := redistest.LaunchSentinel(t.TempDir())
	require.NoError(t, err)
	defer s.Close()
	m, err := s.Master(ctxT(t, 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, 0, m)
	s.Close()
	for i := range s.Nodes() {
		require.False(t, s.Node(i).Running())
	}
	for i := range 3 {
		require.False(t, s.Sentinel(i).Running())
	}
}
