package redisstore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore/internal/record"
)

// trips counts round trips: a pipeline is one.
type trips struct{ c atomic.Int64 }

func (h *trips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.c.Add(1); return next(ctx, cmd) }
}
func (h *trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.c.Add(1); return next(ctx, cmds) }
}

// n returns the round trips counted; reset sets the count to zero.
func (h *trips) n() int { return int(h.c.Load()) }
func (h *trips) reset() { h.c.Store(0) }

// TestReplicas runs the store against a master with one real replica:
// claims wait for the replica's acknowledgement, in the claim's round trip,
// and a claim the replica did not acknowledge is given back before anything
// runs.
func TestReplicas(t *testing.T) {
	master := redistest.Start(t, redistest.Args("--repl-diskless-sync-delay", "0")) // sync the replica at once
	replica := redistest.Start(t, redistest.Args("--replicaof", "127.0.0.1", strconv.Itoa(master.Port())))
	rc := replica.Client(t)
	ctx := context.Background()
	redistest.WaitReplicas(t, master, 1)

	client := master.Client(t)
	rt := &trips{}
	client.AddHook(rt)
	s, err := New(client, Options{Replicas: 1, ReplicaTimeout: 200 * time.Millisecond})
	require.NoError(t, err)

	req := Request{Scope: "a", Key: "replicated", Fingerprint: "f"}
	warm, err := s.Claim(ctx, Request{Key: "warm-up"}) // load the scripts (NOSCRIPT, then EVAL)
	require.NoError(t, err)
	require.NoError(t, warm.Lease.Complete(ctx, Response{}))
	settled(t, s) // the start-up check's commands are not the claim's

	rt.reset()
	c, err := s.Claim(ctx, req)
	require.NoError(t, err)
	require.Equal(t, Claimed, c.Status)
	require.Equal(t, 1, rt.n(), "claim and WAIT share one round trip")
	recKey := s.keys(req.Scope, req.Key).Record()
	n, err := rc.Exists(ctx, recKey).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the replica has the claim before the operation runs")
	require.NoError(t, c.Lease.Checkpoint(ctx, "p", []byte("d")))
	require.NoError(t, c.Lease.Complete(ctx, Response{Code: 201, Body: []byte("ok")}))
	state, err := rc.Get(ctx, recKey).Result()
	require.NoError(t, err)
	require.Equal(t, byte(record.KindCompleted), state[0])

	// The replica hangs: a claim it cannot acknowledge is released and refused.
	replica.Pause()
	start := time.Now()
	_, err = s.Claim(ctx, Request{Key: "unreplicated"})
	require.ErrorIs(t, err, ErrNotReplicated)
	var re *ReplicationError
	require.ErrorAs(t, err, &re)
	require.Equal(t, ReplicationError{Acked: 0, Want: 1}, *re)
	// The bound is the behaviour: ReplicaTimeout ends the wait for a hung
	// replica (which would hold it until Resume); 5s is over 4x what a
	// loaded race build takes.
	require.Less(t, time.Since(start), 5*time.Second)
	_, err = s.Lookup(ctx, "", "unreplicated")
	require.ErrorIs(t, err, ErrNotFound, "nothing is left held")
	// Replays write nothing, so they need no acknowledgement.
	r, err := s.Claim(ctx, req)
	require.NoError(t, err)
	require.Equal(t, Replayed, r.Status)

	replica.Resume()
	require.Eventually(t, func() bool {
		c, err := s.Claim(ctx, Request{Key: "unreplicated"})
		return err == nil && c.Status == Claimed
	}, 10*time.Second, 20*time.Millisecond)
}

// TestReplicasCluster checks that WAIT goes to the master owning the key:
// with no replicas in the cluster, every claim is refused and released.
func TestReplicasCluster(t *testing.T) {
	t.Parallel() // its own servers; mostly waiting on cluster gossip and failovers
	cl := redistest.StartCluster(t, 3)
	s, err := New(cl.Client(t), Options{Replicas: 1, ReplicaTimeout: 20 * time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 6 {
		key := "k" + strconv.Itoa(i)
		_, err := s.Claim(ctx, Request{Key: key})
		require.ErrorIs(t, err, ErrNotReplicated)
		_, err = s.Lookup(ctx, "", key)
		require.ErrorIs(t, err, ErrNotFound)
	}
}

func TestReplicasNeedsAKnownClient(t *testing.T) {
	_, err := New(&redis.Ring{}, Options{Replicas: 1})
	require.ErrorContains(t, err, "Replicas needs")
	_, err = New(redis.NewClient(&redis.Options{}), Options{Replicas: -1})
	require.Error(t, err)
}
