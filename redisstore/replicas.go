package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// eval runs script on keys. With Options.Replicas, for the scripts in
// sources, it sends WAIT in the same pipeline, on the connection (of the
// master owning the keys) that ran the script, so it costs no extra round
// trip; a write acknowledged by too few replicas returns the reply together
// with a *ReplicationError.
func (s *Store) eval(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	if _, replicated := sources[script]; s.replicas == 0 || !replicated {
		return script.Run(ctx, s.client, keys, args...).Result()
	}
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		return s.evalCluster(ctx, c, script, keys, args)
	case *redis.Client:
		return s.evalWait(ctx, c, false, script, keys, args)
	}
	return nil, fmt.Errorf("redisstore: Replicas needs a *redis.Client or *redis.ClusterClient, not %T", s.client)
}

// evalCluster is eval on a cluster. The pipeline goes to the master node
// itself, past the cluster client's routing, so it follows the redirections
// that routing would: MOVED (the slot has a new master: reload the slot map
// and go there), ASK (the slot is migrating and the keys are on the target:
// go there once, after ASKING) and TRYAGAIN (a migration has split the keys:
// wait a moment), up to the client's MaxRedirects. A master that cannot be
// reached makes the client reload its slot map, so that the next call finds
// a replica promoted in its place rather than waiting for the periodic
// reload.
func (s *Store) evalCluster(ctx context.Context, c *redis.ClusterClient, script *redis.Script, keys []string, args []any) (any, error) {
	node, err := c.MasterForKey(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	asking, backoff := false, 10*time.Millisecond
	for redirects := 0; ; redirects++ {
		reply, err := s.evalWait(ctx, node, asking, script, keys, args)
		if err == nil {
			return reply, nil
		}
		moved, isMoved := redis.IsMovedError(err)
		ask, isAsk := redis.IsAskError(err)
		var re redis.Error
		switch {
		case errors.Is(err, ErrNotReplicated):
			return reply, err
		case !errors.As(err, &re):
			c.ReloadState(ctx) // lazily, in the background
			return reply, err
		case redirects >= c.Options().MaxRedirects:
			return reply, err
		case isMoved:
			node, asking = masterAt(ctx, c, moved), false
			if node == nil {
				if node, err = c.MasterForKey(ctx, keys[0]); err != nil {
					return nil, err
				}
			}
		case isAsk:
			if node = masterAt(ctx, c, ask); node == nil {
				return reply, err
			}
			asking = true
		case redis.IsTryAgainError(err): // the same request again, shortly
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return reply, err
			case <-t.C:
			}
			backoff = min(2*backoff, 500*time.Millisecond)
		default:
			return reply, err
		}
	}
}

// masterAt reloads the cluster client's slot map, which a redirection has
// shown to be stale, and returns its client for the master at addr, or nil if
// the map lists no master there.
func masterAt(ctx context.Context, c *redis.ClusterClient, addr string) *redis.Client {
	// Redirections write an IPv6 address bare ("::1:7000"); go-redis names
	// nodes with brackets.
	if i := strings.LastIndexByte(addr, ':'); i >= 0 && !strings.HasPrefix(addr, "[") {
		addr = net.JoinHostPort(addr[:i], addr[i+1:])
	}
	var (
		mu    sync.Mutex
		found *redis.Client
	)
	// ForEachMaster reloads the map before it calls fn, concurrently.
	_ = c.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		if m.Options().Addr == addr {
			mu.Lock()
			found = m
			mu.Unlock()
		}
		return nil
	})
	return found
}

// evalWait runs script and WAIT in one pipeline on node, after ASKING if
// asking is set, and again with EVAL if node lacks the script.
func (s *Store) evalWait(ctx context.Context, node *redis.Client, asking bool, script *redis.Script, keys []string, args []any) (any, error) {
	pipe := node.Pipeline()
	run := func(evalsha bool) (cmd, wait *redis.Cmd) {
		if asking {
			pipe.Do(ctx, "asking")
		}
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
