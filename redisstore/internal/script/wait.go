package script

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

// With Replicas, a script that Waits is sent with WAIT in one pipeline, on
// the connection (of the master owning the keys) that runs the script, so
// WAIT costs no extra round trip and counts the replicas of that write.

// evalWait runs sc with WAIT on node, a single Redis server.
func (r *Runner) evalWait(ctx context.Context, node *redis.Client, asking bool, sc *Script, keys []string, args []any) (any, error) {
	reply, acked, err := r.pipeline(ctx, node, asking, sc, keys, args)
	if err == nil && acked < r.c.Replicas {
		return reply, r.c.NotReplicated(acked, r.c.Replicas)
	}
	return reply, err
}

// evalCluster runs sc with WAIT on a cluster. The pipeline goes to the
// master node itself, past the cluster client's routing, so it follows the
// redirections that routing would: MOVED (the slot has a new master: reload
// the slot map and go there), ASK (the slot is migrating and the keys are
// on the target: go there once, after ASKING) and TRYAGAIN (a migration has
// split the keys: wait a moment, 10ms doubling to 500ms), up to the
// client's MaxRedirects. A master that cannot be reached makes the client
// reload its slot map, so that the next call finds a replica promoted in its
// place rather than waiting for the periodic reload.
func (r *Runner) evalCluster(ctx context.Context, c *redis.ClusterClient, sc *Script, keys []string, args []any) (any, error) {
	node, err := c.MasterForKey(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	asking, backoff := false, 10*time.Millisecond
	for redirects := 0; ; redirects++ {
		reply, acked, err := r.pipeline(ctx, node, asking, sc, keys, args)
		if err == nil {
			if acked < r.c.Replicas {
				return reply, r.c.NotReplicated(acked, r.c.Replicas)
			}
			return reply, nil
		}
		moved, isMoved := redis.IsMovedError(err)
		ask, isAsk := redis.IsAskError(err)
		var re redis.Error
		switch {
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

// pipeline runs sc and WAIT in one pipeline on node, after ASKING if asking
// is set, and again with EVAL if node lacks the script. It returns the
// script's reply (nil if the script failed) and how many replicas WAIT
// counted; err is the script's error, or WAIT's.
func (r *Runner) pipeline(ctx context.Context, node *redis.Client, asking bool, sc *Script, keys []string, args []any) (reply any, acked int, err error) {
	pipe := node.Pipeline()
	run := func(evalsha bool) (cmd, wait *redis.Cmd) {
		if asking {
			pipe.Do(ctx, "asking")
		}
		if evalsha {
			cmd = pipe.EvalSha(ctx, sc.Hash(), keys, args...)
		} else {
			cmd = pipe.Eval(ctx, sc.Source, keys, args...)
		}
		wait = pipe.Do(ctx, "wait", r.c.Replicas, r.c.ReplicaTimeout.Milliseconds())
		_, _ = pipe.Exec(ctx)
		return cmd, wait
	}
	cmd, wait := run(true)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd, wait = run(false)
	}
	reply, err = cmd.Result()
	if err != nil {
		return nil, 0, err
	}
	acked, err = wait.Int()
	if err != nil {
		return reply, 0, fmt.Errorf("redisstore: wait for replicas: %w", err)
	}
	return reply, acked, nil
}
