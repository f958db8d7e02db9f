package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/redisstore/internal/check"
)

// checkByName runs Check and returns its results by name, after checking
// that every check ran once, in order.
func checkByName(t *testing.T, s *Store) map[string]CheckResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results, err := s.Check(ctx)
	require.NoError(t, err)
	var names []string
	out := map[string]CheckResult{}
	for _, r := range results {
		names = append(names, r.Name)
		out[r.Name] = r
		require.Contains(t, []CheckStatus{CheckOK, CheckWarn, CheckFail}, r.Status)
		require.NotEmpty(t, r.Message, r.Name)
		require.NotContains(t, r.Message, "\n", r.Name)
	}
	require.Equal(t, []string{"version", "maxmemory-policy", "persistence", "replication", "cluster",
		"scripts", "latency", "in-progress"}, names)
	return out
}

func checkStore(t *testing.T, c redis.Scripter, opts Options) *Store {
	t.Helper()
	s, err := New(c, opts)
	require.NoError(t, err)
	return s
}

func requireNoFail(t *testing.T, rs map[string]CheckResult) {
	t.Helper()
	for _, r := range rs {
		require.NotEqual(t, CheckFail, r.Status, "%s: %s", r.Name, r.Message)
	}
}

// A default redis-server (as redistest starts it: no persistence) passes,
// with a warning about persistence; the observer sees none of the checks.
func TestCheckDefaultRedis(t *testing.T) {
	srv := redistest.Start(t)
	var seen int
	obs := observe.Func{OnRedis: func(context.Context, *observe.Call) { seen++ }}
	rs := checkByName(t, checkStore(t, srv.Client(t), Options{Observer: obs}))
	requireNoFail(t, rs)
	require.Zero(t, seen)
	require.Equal(t, CheckOK, rs["version"].Status)
	require.Regexp(t, `^Redis \d+\.\d+\.\d+ \(standalone\)$`, rs["version"].Message)
	require.Equal(t, CheckResult{"maxmemory-policy", CheckOK, "noeviction, no maxmemory"}, rs["maxmemory-policy"])
	require.Equal(t, CheckWarn, rs["persistence"].Status)
	require.Contains(t, rs["persistence"].Message, "neither AOF nor RDB")
	require.Equal(t, CheckOK, rs["replication"].Status)
	require.Contains(t, rs["replication"].Message, "master with 0 replicas online")
	require.Equal(t, CheckResult{"cluster", CheckOK, "not a cluster"}, rs["cluster"])
	require.Equal(t, CheckOK, rs["scripts"].Status)
	require.Contains(t, rs["scripts"].Message, "9 scripts loaded; a claim and its release ran in")
	require.Contains(t, rs["latency"].Message, "over 300 PINGs")
	require.Equal(t, CheckResult{"in-progress", CheckOK, `0 records under "idem:", none in progress`}, rs["in-progress"])

	// The throwaway claim left nothing behind.
	keys, err := srv.Client(t).Keys(context.Background(), "*").Result()
	require.NoError(t, err)
	require.Empty(t, keys)
}

// An evicting policy with maxmemory set fails, and names the policy.
func TestCheckEvictingRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Args("--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl"))
	rs := checkByName(t, checkStore(t, srv.Client(t), Options{}))
	require.Equal(t, CheckFail, rs["maxmemory-policy"].Status)
	require.Contains(t, rs["maxmemory-policy"].Message, "volatile-ttl with maxmemory 64.0 MiB")
	require.Contains(t, rs["maxmemory-policy"].Message, "set maxmemory-policy noeviction")
}

func TestCheckEvictionPolicies(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		status CheckStatus
		want   string
	}{
		{[]string{"--maxmemory", "1gb"}, CheckOK, "noeviction with maxmemory 1.0 GiB"},
		{[]string{"--maxmemory-policy", "allkeys-lru"}, CheckWarn, "allkeys-lru without maxmemory"},
		{[]string{"--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lfu"}, CheckFail, "allkeys-lfu with maxmemory 100.0 MiB"},
	} {
		t.Run(fmt.Sprint(tc.args), func(t *testing.T) {
			srv := redistest.Start(t, redistest.Args(tc.args...))
			rs := checkByName(t, checkStore(t, srv.Client(t), Options{}))
			require.Equal(t, tc.status, rs["maxmemory-policy"].Status, rs["maxmemory-policy"].Message)
			require.Contains(t, rs["maxmemory-policy"].Message, tc.want)
		})
	}
}

// With CONFIG disabled (managed Redis), the policy comes from INFO and the
// unknown RDB schedule is a warning, not a failure.
func TestCheckConfigDisabled(t *testing.T) {
	srv := redistest.Start(t, redistest.Args("--rename-command", "CONFIG", ""))
	rs := checkByName(t, checkStore(t, srv.Client(t), Options{}))
	requireNoFail(t, rs)
	require.Equal(t, CheckResult{"maxmemory-policy", CheckOK, "noeviction, no maxmemory"}, rs["maxmemory-policy"])
	require.Equal(t, CheckWarn, rs["persistence"].Status)
	require.Contains(t, rs["persistence"].Message, "CONFIG is disabled (managed Redis?)")

	srv = redistest.Start(t, redistest.Args("--rename-command", "CONFIG", "", "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"))
	rs = checkByName(t, checkStore(t, srv.Client(t), Options{}))
	require.Equal(t, CheckFail, rs["maxmemory-policy"].Status, "INFO shows the policy")
}

func TestCheckPersistence(t *testing.T) {
	srv := redistest.Start(t, redistest.Args("--appendonly", "yes"))
	rs := checkByName(t, checkStore(t, srv.Client(t), Options{}))
	require.Equal(t, CheckResult{"persistence", CheckOK, "AOF (appendfsync everysec)"}, rs["persistence"])

	srv = redistest.Start(t, redistest.Args("--save", "900 1"))
	rs = checkByName(t, checkStore(t, srv.Client(t), Options{}))
	require.Equal(t, CheckOK, rs["persistence"].Status)
	require.Contains(t, rs["persistence"].Message, "RDB snapshots (save 900 1), no AOF")
}

// Options.Replicas above the replicas there are fails: every claim would.
func TestCheckReplicas(t *testing.T) {
	srv := redistest.Start(t)
	rs := checkByName(t, checkStore(t, srv.Client(t), Options{Replicas: 1}))
	require.Equal(t, CheckFail, rs["replication"].Status)
	require.Contains(t, rs["replication"].Message, "Options.Replicas is 1")
	require.Equal(t, CheckFail, rs["scripts"].Status)
	require.Contains(t, rs["scripts"].Message, "a claim failed")
}

// The in-progress check counts the records under the prefix (and only
// those) and tells live leases from those that ran out.
func TestCheckInProgress(t *testing.T) {
	srv := redistest.Start(t)
	const prefix = "t[1]*:" // SCAN's glob characters are taken literally
	ctx := context.Background()
	long := checkStore(t, srv.Client(t), Options{Prefix: prefix})
	short := checkStore(t, srv.Client(t), Options{Prefix: prefix, Lease: 100 * time.Millisecond})
	other := checkStore(t, srv.Client(t), Options{Prefix: "t1x:"})

	_, err := long.Claim(ctx, Request{Key: "running"})
	require.NoError(t, err)
	_, err = short.Claim(ctx, Request{Key: "crashed"})
	require.NoError(t, err)
	done, err := long.Claim(ctx, Request{Key: "done"})
	require.NoError(t, err)
	require.NoError(t, done.Lease.Complete(ctx, Response{Code: 201, Body: []byte("ok")}))
	_, err = other.Claim(ctx, Request{Key: "elsewhere"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		rec, err := long.Lookup(ctx, "", "crashed")
		require.NoError(t, err)
		return rec.LeaseTTL == 0
	}, 10*time.Second, 10*time.Millisecond)

	rs := checkByName(t, long)
	r := rs["in-progress"]
	require.Equal(t, CheckWarn, r.Status, r.Message)
	require.Contains(t, r.Message, `3 records under "t[1]*:", 2 in progress: 1 with a live lease, 1 whose lease ran out; oldest started`)
	require.Contains(t, r.Message, "the longest-lapsed lease ran out")
	require.Contains(t, r.Message, "("+long.keys("", "crashed").Record()+")")
	requireNoFail(t, rs)

	// Only live leases: ok.
	rs = checkByName(t, other)
	require.Equal(t, CheckOK, rs["in-progress"].Status)
	require.Contains(t, rs["in-progress"].Message, `1 records under "t1x:", 1 in progress: 1 with a live lease, 0 whose lease ran out`)
}

// A released record (its run was cut off and gave its lease back) has no
// live lease: nobody holds it, and the check counts it with the leases that
// ran out, as doctor's list of stuck records does.
func TestCheckInProgressCountsReleasedRecords(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s := checkStore(t, srv.Client(t), Options{Prefix: "rel:"})
	c, err := s.Claim(ctx, Request{Key: "cut-off"})
	require.NoError(t, err)
	require.NoError(t, c.Lease.Interrupt(ctx))
	rec, err := s.Lookup(ctx, "", "cut-off")
	require.NoError(t, err)
	require.Equal(t, Released, rec.State)

	r := checkByName(t, s)["in-progress"]
	require.Equal(t, CheckWarn, r.Status, r.Message)
	require.Contains(t, r.Message, `1 records under "rel:", 1 in progress: 0 with a live lease, 1 whose lease ran out`)
	require.NotContains(t, r.Message, "the longest-lapsed lease ran out 0s")
}

func TestCheckUnreachable(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs, err := checkStore(t, c, Options{}).Check(ctx)
	require.Error(t, err)
	require.Nil(t, rs)
	require.Contains(t, err.Error(), "127.0.0.1:1")
}

// On a cluster, every master is checked; through a single-node client, or
// its auto-pipeliner, the cluster check fails.
func TestCheckCluster(t *testing.T) {
	t.Parallel() // its own servers; mostly waiting on cluster gossip and failovers
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	s := checkStore(t, cc, Options{})
	ctx := context.Background()
	for i := range 20 {
		_, err := s.Claim(ctx, Request{Key: fmt.Sprint("k", i)})
		require.NoError(t, err)
	}
	rs := checkByName(t, s)
	requireNoFail(t, rs)
	require.Contains(t, rs["version"].Message, "(cluster, 3 masters)")
	require.Equal(t, CheckOK, rs["cluster"].Status)
	require.Contains(t, rs["cluster"].Message, "cluster of 3 masters (3 nodes known), state ok, 16384 of 16384 slots ok")
	require.Contains(t, rs["replication"].Message, "3 masters with 0/0/0 replicas online")
	require.Contains(t, rs["in-progress"].Message, "20 records under \"idem:\", 20 in progress: 20 with a live lease")

	single := redis.NewClient(&redis.Options{Addr: cl.Addrs()[0]})
	t.Cleanup(func() { _ = single.Close() })
	rs = checkByName(t, checkStore(t, single, Options{}))
	require.Equal(t, CheckFail, rs["cluster"].Status)
	require.Contains(t, rs["cluster"].Message, "use redis.NewClusterClient")

	// Through an auto-pipeliner, which hides its client, Check asks every
	// master about a key of its own: the cluster client's pipeliner routes
	// them, a single-node client's gets MOVED.
	rs = checkByName(t, checkStore(t, autoPipeliner(t, cc), Options{}))
	requireNoFail(t, rs)
	require.Equal(t, CheckResult{"cluster", CheckWarn, "cluster of 3 masters, reached through an auto-pipeliner, which routes by slot; " +
		"the other checks, in-progress records included, saw one master only: to check them all, run Check on a store on the cluster client"},
		rs["cluster"])
	rs = checkByName(t, checkStore(t, autoPipeliner(t, single), Options{}))
	require.Equal(t, CheckFail, rs["cluster"].Status)
	require.Contains(t, rs["cluster"].Message, "use redis.NewClusterClient(...).AutoPipeline()")

	// A slot that no node serves fails the cluster's state: the check
	// fails through the cluster client and through its pipeliner alike.
	for _, addr := range cl.Addrs() {
		node := redis.NewClient(&redis.Options{Addr: addr})
		require.NoError(t, node.ClusterDelSlots(ctx, 0).Err())
		require.NoError(t, node.Close())
	}
	stateFail := func() bool {
		for _, addr := range cl.Addrs() {
			node := redis.NewClient(&redis.Options{Addr: addr})
			info, err := node.ClusterInfo(ctx).Result()
			_ = node.Close()
			if err != nil || !strings.Contains(info, "cluster_state:fail") {
				return false
			}
		}
		return true
	}
	require.Eventually(t, stateFail, 10*time.Second, 20*time.Millisecond, "cluster state never turned fail")
	rs = checkByName(t, checkStore(t, cc, Options{}))
	require.Equal(t, CheckFail, rs["cluster"].Status)
	require.Contains(t, rs["cluster"].Message, "state fail, 16383 of 16384 slots ok")
	rs = checkByName(t, checkStore(t, autoPipeliner(t, cc), Options{}))
	require.Equal(t, CheckResult{"cluster", CheckFail, "cluster state fail, 16383 of 16384 slots ok: claims on the slots not served fail"},
		rs["cluster"])
}

// A store on a single node's auto-pipeliner is checked as on the client,
// but Check warns that it cannot tell a Ring's pipeliner from it.
func TestCheckPipelined(t *testing.T) {
	srv := redistest.Start(t)
	rs := checkByName(t, checkStore(t, autoPipeliner(t, srv.Client(t)), Options{}))
	requireNoFail(t, rs)
	require.Equal(t, CheckWarn, rs["cluster"].Status)
	require.Contains(t, rs["cluster"].Message, "cannot tell a Ring")
	require.Equal(t, CheckOK, rs["scripts"].Status)
}

// miniredis tells little in INFO and has no CONFIG: Check warns about what it
// cannot tell, and runs the scripts.
func TestCheckMiniredis(t *testing.T) {
	b := miniBackend(t)
	rs := checkByName(t, checkStore(t, b.client, Options{}))
	requireNoFail(t, rs)
	require.Equal(t, CheckWarn, rs["version"].Status)
	require.Contains(t, rs["version"].Message, "does not give its version in INFO")
	require.Equal(t, CheckWarn, rs["maxmemory-policy"].Status)
	require.Equal(t, CheckOK, rs["scripts"].Status)
}

// TestCheckStatuses: checkResults maps the internal statuses by conversion.
func TestCheckStatuses(t *testing.T) {
	require.Equal(t, []CheckStatus{CheckOK, CheckWarn, CheckFail},
		[]CheckStatus{CheckStatus(check.OK), CheckStatus(check.Warn), CheckStatus(check.Fail)})
}
