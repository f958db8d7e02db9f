package check

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Eviction is the store's start-up check: it reads the eviction policy of
// every master t reaches (CONFIG GET maxmemory*, or INFO memory where
// CONFIG is disabled) and returns the maxmemory-policy result for those it
// reached (an empty Result if none), whether it reached them all, and
// whether the client may reach several servers: a cluster or a Ring, or,
// behind an auto-pipeliner (which hides which), a server in cluster mode as
// INFO cluster says. It sends one or two commands per master.
func (t *Target) Eviction(ctx context.Context) (r Result, all, cluster bool) {
	switch t.Client.(type) {
	case *redis.Client:
	default:
		cluster = true // behind a pipeliner, until INFO says otherwise
	}
	if _, ok := t.Client.(redis.Cmdable); !ok {
		return Result{Eviction, Warn, fmt.Sprintf("cannot check maxmemory-policy through a %T (not a redis.Cmdable): make sure it is noeviction", t.Client)}, true, cluster
	}
	nodes, err := t.nodes(ctx)
	if err != nil {
		return Result{}, false, cluster
	}
	_, pipelined := t.Client.(*redis.AutoPipeliner)
	reached := nodes[:0]
	for _, n := range nodes {
		n.info = map[string]string{}
		m, err := n.c.ConfigGet(ctx, "maxmemory*").Result()
		switch {
		case err == nil && m["maxmemory-policy"] != "":
			n.info["maxmemory_policy"], n.info["maxmemory"] = m["maxmemory-policy"], m["maxmemory"]
		case err != nil && !isReply(err):
			continue // not reached
		default: // CONFIG is disabled (managed Redis): INFO may show it
			text, err := n.c.Info(ctx, "memory").Result()
			if err != nil && !isReply(err) {
				continue
			}
			n.info = parseInfo(text)
		}
		if pipelined {
			text, err := n.c.Info(ctx, "cluster").Result()
			cluster = err != nil || parseInfo(text)["cluster_enabled"] != "0"
		}
		reached = append(reached, n)
	}
	if len(reached) == 0 {
		return Result{}, false, cluster
	}
	return eviction(reached), len(reached) == len(nodes), cluster
}

// isReply reports whether err is an error reply from Redis: it was reached.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}
