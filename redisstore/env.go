package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkey/idemkey/redisstore/internal/check"
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
	if !s.opts.RequireNoEviction {
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
	t := check.Target{Client: s.client}
	r, all, cluster := t.Eviction(ctx)
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
	if r.Status == check.Fail && s.opts.RequireNoEviction {
		e.evict = fmt.Errorf("%w: %s", ErrEvicting, r.Message)
		r.Message += "; claims are refused (Options.RequireNoEviction) until it is"
	}
	if r.Message != "" && r.Message != e.logged {
		e.logged = r.Message
		switch r.Status {
		case check.Fail:
			s.opts.Logger.Error("redisstore: maxmemory-policy: " + r.Message)
		case check.Warn:
			s.opts.Logger.Warn("redisstore: maxmemory-policy: " + r.Message)
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
