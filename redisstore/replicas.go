package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ErrNotReplicated means fewer replicas than Options.Replicas acknowledged a
// write within Options.ReplicaTimeout, so a failover could lose it. A claim
// that is not replicated is released before Claim returns: nothing has run.
// The error is a *ReplicationError.
var ErrNotReplicated = errors.New("redisstore: write not acknowledged by enough replicas")

// ReplicationError reports how many replicas acknowledged a write. It matches
// ErrNotReplicated with errors.Is.
type ReplicationError struct {
	// Acked is how many replicas acknowledged the write in time.
	Acked int
	// Want is Options.Replicas.
	Want int
}

// Error says how many replicas acknowledged the write.
func (e *ReplicationError) Error() string {
	return fmt.Sprintf("redisstore: write acknowledged by %d of %d replicas", e.Acked, e.Want)
}

// Is reports whether target is ErrNotReplicated.
func (e *ReplicationError) Is(target error) bool { return target == ErrNotReplicated }

// eval runs script on keys. With Options.Replicas it sends WAIT in the same
// pipeline, on the connection (of the master owning the keys) that ran the
// script, so it costs no extra round trip; a write acknowledged by too few
// replicas returns the reply together with a *ReplicationError.
func (s *Store) eval(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	if s.replicas == 0 {
		return script.Run(ctx, s.client, keys, args...).Result()
	}
	var pipe redis.Pipeliner
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		master, err := c.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, err
		}
		pipe = master.Pipeline()
	case *redis.Client:
		pipe = c.Pipeline()
	}
	run := func(evalsha bool) (cmd, wait *redis.Cmd) {
		if evalsha {
			cmd = pipe.EvalSha(ctx, script.Hash(), keys, args...)
		} else {
			cmd = pipe.Eval(ctx, sources[script], keys, args...)
		}
		wait = pipe.Do(ctx, "wait", s.replicas, s.replicaTimeout.Milliseconds())
		_, _ = pipe.Exec(ctx)
		return cmd, wait
	}
	cmd, wait := run(true)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd, wait = run(false)
	}
	reply, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	acked, err := wait.Int()
	if err != nil {
		return reply, fmt.Errorf("redisstore: wait for replicas: %w", err)
	}
	if acked < s.replicas {
		return reply, &ReplicationError{Acked: acked, Want: s.replicas}
	}
	return reply, nil
}
