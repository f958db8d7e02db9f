package redisstore

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore/internal/script"
)

// Options.Replicas on a cluster sends each script and its WAIT to the master
// of the key's slot itself, outside the cluster client's routing: these
// tests move slots and masters under a client whose slot map is stale.

// replicatedCluster starts 3 masters with a replica each and a store with
// Replicas: 1 on a cluster client of it, whose slot map and scripts are
// loaded by a first claim.
func replicatedCluster(t *testing.T) (*redistest.Cluster, *redis.ClusterClient, *Store) {
	t.Helper()
	cl := redistest.StartCluster(t, 3, redistest.Replicas(1), redistest.Args("--cluster-node-timeout", "1000"))
	client := cl.Client(t)
	s, err := New(client, Options{Replicas: 1, ReplicaTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		for _, sc := range []*script.Script{claimScript, completeScript, checkpointScript} {
			if err := sc.Load(ctx, m).Err(); err != nil {
				return err
			}
		}
		return nil
	}))
	return cl, client, s
}

// keyOn returns a request whose record is served by node master now.
func keyOn(t *testing.T, cl *redistest.Cluster, s *Store, master int, name string) Request {
	t.Helper()
	ctx := context.Background()
	for i := range 200 {
		req := Request{Scope: "redirect", Key: name + strconv.Itoa(i), Fingerprint: "f"}
		m, err := cl.MasterFor(ctx, s.keys(req.Scope, req.Key).Record())
		require.NoError(t, err)
		if m == master {
			return req
		}
	}
	t.Fatalf("no key on node %d in 200 tries", master)
	return Request{}
}

// TestReplicasClusterFailover: after CLUSTER FAILOVER, the client still sends
// the record's slot to the old master, now a replica, which answers MOVED.
// Complete must follow it and store the outcome (it used to return MOVED as
// final, so the outcome was lost and a retry ran the operation again), and a
// claim in the slot must succeed at once (it used to fail until go-redis
// reloaded its slot map, 60 s later).
func TestReplicasClusterFailover(t *testing.T) {
	t.Parallel() // its own servers; mostly waiting on cluster gossip and failovers
	cl, _, s := replicatedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held := keyOn(t, cl, s, 0, "held")
	fresh := keyOn(t, cl, s, 0, "fresh")
	c, err := s.Claim(ctx, held)
	require.NoError(t, err)
	require.Equal(t, Claimed, c.Status)

	promoted, err := cl.Failover(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 3, promoted)

	require.NoError(t, c.Lease.Complete(ctx, Response{Code: 201, Body: []byte("charged")}))
	rec, err := s.Lookup(ctx, held.Scope, held.Key)
	require.NoError(t, err)
	require.Equal(t, Completed, rec.State)
	require.Equal(t, &Response{Code: 201, Body: []byte("charged")}, rec.Response)

	r, err := s.Claim(ctx, held)
	require.NoError(t, err)
	require.Equal(t, Replayed, r.Status)
	c, err = s.Claim(ctx, fresh)
	require.NoError(t, err)
	require.Equal(t, Claimed, c.Status)
	require.NoError(t, c.Lease.Checkpoint(ctx, "step", []byte("1")))
	require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200}))
}

// TestReplicasClusterReshard moves the record's slot to another master while
// its lease is held, as redis-cli --cluster reshard does: keys split between
// the two masters (TRYAGAIN), all on the target while the slot is still
// migrating (ASK), then the slot assigned to the target (MOVED). None of
// them is a final answer, and each is followed.
func TestReplicasClusterReshard(t *testing.T) {
	t.Parallel() // its own servers; mostly waiting on cluster gossip and failovers
	cl, client, s := replicatedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := keyOn(t, cl, s, 0, "moving")
	c, err := s.Claim(ctx, req)
	require.NoError(t, err)
	require.Equal(t, Claimed, c.Status)

	src, dst := cl.Node(0).Client(t), cl.Node(1).Client(t)
	srcID, err := src.ClusterMyID(ctx).Result()
	require.NoError(t, err)
	dstID, err := dst.ClusterMyID(ctx).Result()
	require.NoError(t, err)
	slot, err := client.ClusterKeySlot(ctx, s.keys(req.Scope, req.Key).Record()).Result()
	require.NoError(t, err)
	require.NoError(t, dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	require.NoError(t, src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	keys, err := src.ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	migrate := func(keys ...string) {
		t.Helper()
		args := []any{"MIGRATE", "127.0.0.1", cl.Node(1).Port(), "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		require.NoError(t, src.Do(ctx, args...).Err())
	}

	if len(keys) > 1 {
		// Part of the record's keys moved: a script on all of them gets
		// TRYAGAIN from both masters until the rest follows.
		migrate(keys[1:]...)
		err := c.Lease.Checkpoint(ctx, "step", []byte("1"))
		require.True(t, redis.IsTryAgainError(err), "got %v", err)
		require.False(t, script.IsFinal(err), "TRYAGAIN is not a final answer")
		migrate(keys[0])
	} else {
		migrate(keys...)
	}
	// All keys on the target, the slot still migrating: the source answers
	// ASK, the target serves the script after ASKING.
	require.NoError(t, c.Lease.Checkpoint(ctx, "step", []byte("2")))

	// The slot belongs to the target: the source answers MOVED.
	for _, n := range []*redis.Client{dst, src, cl.Node(2).Client(t)} {
		require.NoError(t, n.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
	}
	rec, err := s.Lookup(ctx, req.Scope, req.Key)
	require.NoError(t, err)
	require.Equal(t, []byte("2"), rec.RecoveryData, "the checkpoint ran on the target")
	require.NoError(t, c.Lease.Complete(ctx, Response{Code: 201, Body: []byte("moved")}))
	r, err := s.Claim(ctx, req)
	require.NoError(t, err)
	require.Equal(t, Replayed, r.Status)
	require.Equal(t, Response{Code: 201, Body: []byte("moved")}, r.Response)
}

// TestReplicasClusterKillMaster: after a master dies and its replica takes
// over, the client's slot map still names the dead master. A failed call
// must make the client reload it, so that claims reach the new master within
// moments, not after go-redis's 60 s reload interval. The new master has no
// replica until the dead one comes back as its replica, so claims are refused
// as not replicated until then.
func TestReplicasClusterKillMaster(t *testing.T) {
	t.Parallel() // its own servers; mostly waiting on cluster gossip and failovers
	cl, _, s := replicatedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := keyOn(t, cl, s, 0, "orphan")

	start := time.Now()
	promoted, err := cl.KillMaster(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 3, promoted)
	t.Logf("replica promoted after %v", time.Since(start))
	var last error
	require.Eventually(t, func() bool {
		_, last = s.Claim(ctx, req)
		return errors.Is(last, ErrNotReplicated)
	}, 10*time.Second, 20*time.Millisecond, "claims never reached the new master: %v", last)
	t.Logf("claims reach the new master after %v", time.Since(start))

	cl.Node(0).Restart(t)
	require.NoError(t, cl.WaitOK(ctx))
	t.Logf("old master restarted, cluster ok after %v", time.Since(start))
	require.Eventually(t, func() bool {
		c, err := s.Claim(ctx, req)
		last = err
		return err == nil && c.Status == Claimed
	}, 20*time.Second, 20*time.Millisecond, "no claim once the old master is back as a replica: %v", last)
	t.Logf("claims succeed after %v", time.Since(start))
}
