package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The start-up check: on its first claim the store checks, in the
// background, that Redis does not evict records (maxmemory-policy, on every
// master), and, behind an auto-pipeliner, whether the server runs in
// cluster mode (outage.go needs to know). It logs what it finds, once; with
// Options.RequireNoEviction, claims wait for its verdict and are refused
// while Redis may evict.
type envCheck struct {
	settled atomic.Bool // nothing more to check: claims pass without a look

	mu      sync.Mutex
	running bool
	done    chan struct{} // closed when the running check ends
	next    time.Time     // when a check may run again
	evict   error         // the evicting verdict, with RequireNoEviction
	logged  string        // the last finding logged, not to repeat it
}

const (
	envRetry     = time.Second      // a check that could not reach every master runs again on a claim this long after
	envRecheck   = 10 * time.Second // with RequireNoEviction, an evicting Redis is checked again this long after
	envCheckTime = 5 * time.Second  // a check's deadline
)

// envReady runs the start-up check for a claim: it starts the check when it
// is due and, with RequireNoEviction, waits for its verdict and returns an
// error matching ErrEvicting when Redis may evict.
func (s *Store) envReady(ctx context.Context) error {
	if s.env.settled.Load() {
		return nil
	}
	e := &s.env
	e.mu.Lock()
	if !e.running && !time.Now().Before(e.next) {
		e.running, e.done = true, make(chan struct{})
		go s.runEnvCheck(e.done)
	}
	done, running := e.done, e.running
	e.mu.Unlock()
	if !s.requireNoEviction {
		return nil
	}
	if running {
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("redisstore: claim: waiting for the maxmemory-policy check: %w", context.Cause(ctx))
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.evict
}

// runEnvCheck checks Redis and records the verdict.
func (s *Store) runEnvCheck(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), envCheckTime)
	defer cancel()
	r, all, cluster := s.checkEnv(ctx)
	e := &s.env
	e.mu.Lock()
	defer func() {
		e.running = false
		close(done)
		e.mu.Unlock()
	}()
	if !cluster {
		s.out.single.Store(true) // outage.go
	}
	e.evict = nil
	if r.Status == CheckFail && s.requireNoEviction {
		e.evict = fmt.Errorf("%w: %s", ErrEvicting, r.Message)
		r.Message += "; claims are refused (Options.RequireNoEviction) until it is"
	}
	if r.Message != "" && r.Message != e.logged {
		e.logged = r.Message
		switch r.Status {
		case CheckFail:
			s.logger.Error("redisstore: maxmemory-policy: " + r.Message)
		case CheckWarn:
			s.logger.Warn("redisstore: maxmemory-policy: " + r.Message)
		}
	}
	switch {
	case e.evict != nil:
		e.next = time.Now().Add(envRecheck) // perhaps fixed meanwhile (CONFIG SET)
	case !all:
		e.next = time.Now().Add(envRetry) // a master was not reached: the claims say so
	default:
		e.settled.Store(true)
	}
}

// checkEnv reads the eviction policy of every master (CONFIG GET, or INFO
// memory where CONFIG is disabled) and returns checkEviction's verdict on
// those it reached, an empty one if it reached none; whether it reached
// them all; and whether the client may reach several servers (a cluster, a
// Ring, or a server in cluster mode behind an auto-pipeliner).
func (s *Store) checkEnv(ctx context.Context) (r CheckResult, all, cluster bool) {
	switch s.client.(type) {
	case *redis.Client:
	case *redis.AutoPipeliner:
		cluster = true // until INFO says otherwise
	default:
		cluster = true
	}
	if _, ok := s.client.(redis.Cmdable); !ok {
		return CheckResult{CheckEviction, CheckWarn, fmt.Sprintf("cannot check maxmemory-policy through a %T (not a redis.Cmdable): make sure it is noeviction", s.client)}, true, cluster
	}
	nodes, err := s.checkNodes(ctx)
	if err != nil {
		return CheckResult{}, false, cluster
	}
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
		if _, ap := s.client.(*redis.AutoPipeliner); ap {
			text, err := n.c.Info(ctx, "cluster").Result()
			cluster = err != nil || parseInfo(text)["cluster_enabled"] != "0"
		}
		reached = append(reached, n)
	}
	if len(reached) == 0 {
		return CheckResult{}, false, cluster
	}
	return checkEviction(reached), len(reached) == len(nodes), cluster
}

// isReply reports whether err is an error reply from Redis: it was reached.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}
