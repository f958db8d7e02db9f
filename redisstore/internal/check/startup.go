package check

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/redisstore/internal/script"
)

// Startup is the store's start-up check: on its first claim the store
// checks, in the background, that Redis does not evict records
// (maxmemory-policy, on every master: Eviction), and, behind an
// auto-pipeliner, whether the server runs in cluster mode. It logs what it
// finds, once; with Require, claims wait for its verdict and are refused
// while Redis may evict. Set the exported fields before the first Ready;
// it is safe for concurrent use.
type Startup struct {
	// Client is the store's client.
	Client redis.Scripter
	// Require makes Ready wait for the verdict, and fail while Redis may
	// evict (Options.RequireNoEviction).
	Require bool
	// Logger receives the findings.
	Logger *slog.Logger
	// Evicting makes Ready's error from the finding, with Require.
	Evicting func(finding string) error
	// OneServer, if not nil, is called when the check finds that the
	// client reaches one server.
	OneServer func()

	settled atomic.Bool // nothing more to check: claims pass without a look

	mu      sync.Mutex
	running bool
	done    chan struct{} // closed when the running check ends
	next    time.Time     // when a check may run again
	evict   error         // the evicting verdict, with Require
	logged  string        // the last finding logged, not to repeat it
}

const (
	startupRetry   = time.Second      // a check that could not reach every master runs again on a claim this long after
	startupRecheck = 10 * time.Second // with Require, an evicting Redis is checked again this long after
	startupTime    = 5 * time.Second  // a check's deadline
)

// Ready runs the start-up check for a claim: it starts the check when it
// is due and, with Require, waits for its verdict and returns the
// Evicting error when Redis may evict.
func (s *Startup) Ready(ctx context.Context) error {
	if s.settled.Load() {
		return nil
	}
	s.mu.Lock()
	if !s.running && !time.Now().Before(s.next) {
		s.running, s.done = true, make(chan struct{})
		go s.run(s.done)
	}
	done, running := s.done, s.running
	s.mu.Unlock()
	if !s.Require {
		return nil
	}
	if running {
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("redisstore: claim: waiting for the maxmemory-policy check: %w", context.Cause(ctx))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.evict
}

// Settle ends the check for good, or before it starts: Ready passes.
func (s *Startup) Settle() { s.settled.Store(true) }

// Settled reports whether the check has nothing more to do.
func (s *Startup) Settled() bool { return s.settled.Load() }

// Due makes the next check due at once, rather than a while after the
// last one (for tests: the while has passed).
func (s *Startup) Due() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next = time.Time{}
}

// run checks Redis and records the verdict.
func (s *Startup) run(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), startupTime)
	defer cancel()
	t := Target{Client: s.Client}
	r, all, cluster := t.Eviction(ctx)
	s.mu.Lock()
	defer func() {
		s.running = false
		close(done)
		s.mu.Unlock()
	}()
	if !cluster && s.OneServer != nil {
		s.OneServer()
	}
	s.evict = nil
	if r.Status == Fail && s.Require {
		s.evict = s.Evicting(r.Message)
		r.Message += "; claims are refused (Options.RequireNoEviction) until it is"
	}
	if r.Message != "" && r.Message != s.logged {
		s.logged = r.Message
		switch r.Status {
		case Fail:
			s.Logger.Error("redisstore: maxmemory-policy: " + r.Message)
		case Warn:
			s.Logger.Warn("redisstore: maxmemory-policy: " + r.Message)
		}
	}
	switch {
	case s.evict != nil:
		s.next = time.Now().Add(startupRecheck) // perhaps fixed meanwhile (CONFIG SET)
	case !all:
		s.next = time.Now().Add(startupRetry) // a master was not reached: the claims say so
	default:
		s.settled.Store(true)
	}
}

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
		case err != nil && !script.IsReply(err):
			continue // not reached
		default: // CONFIG is disabled (managed Redis): INFO may show it
			text, err := n.c.Info(ctx, "memory").Result()
			if err != nil && !script.IsReply(err) {
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
