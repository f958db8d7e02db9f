package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A Redis that refuses connections is down, and every claim would wait for
// the client's own dial retries (go-redis: five dials per attempt and four
// attempts, about 1.7s) or, on an auto-pipeliner, for its whole deadline,
// to learn it. So the first refusal the store sees ends the claims in
// flight and makes every claim after it fail at once, with that refusal as
// its cause, while one probe in the background asks Redis every
// outageProbe until it accepts a connection again (or any call gets an
// answer). Only where the client reaches one server: on a cluster, one
// master's refusal says nothing about the others'.
type outage struct {
	single atomic.Bool                   // the client reaches one server (env.go decides behind a pipeliner)
	cur    atomic.Pointer[refusal]       // while Redis refuses connections
	notify atomic.Pointer[chan struct{}] // closed when an outage begins, for the claims in flight
	asked  atomic.Int64                  // unix nanos of the last claim refused at once
	mu     sync.Mutex                    // orders beginnings and ends
}

// refusal is an outage: the first refused connection and when.
type refusal struct {
	err   error
	since time.Time
}

const (
	outageProbe     = 50 * time.Millisecond  // between probes
	outageProbeTime = 250 * time.Millisecond // a probe's deadline
	outageIdle      = 10 * time.Second       // no claim for this long: stop probing (the next claim finds out)
	outageMax       = 30 * time.Second       // probe this long at most; then a claim asks Redis again
)

// refusedError is the error of a claim refused at once during an outage.
type refusedError struct{ r *refusal }

func (e *refusedError) Error() string {
	return fmt.Sprintf("Redis refuses connections (for %v; claims fail at once until it accepts one): %v",
		time.Since(e.r.since).Round(time.Millisecond), e.r.err)
}

func (e *refusedError) Unwrap() error { return e.r.err }

// isRefused reports whether err says Redis refused a connection.
func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// refusing returns the error for a claim during an outage, nil otherwise.
func (o *outage) refusing() error {
	r := o.cur.Load()
	if r == nil {
		return nil
	}
	o.asked.Store(time.Now().UnixNano())
	return &refusedError{r}
}

// began returns a channel closed when an outage begins: a claim in flight
// stops waiting then.
func (o *outage) began() <-chan struct{} { return *o.notify.Load() }

// note learns from the result of a call to Redis: an answer ends an
// outage, a refused connection begins one.
func (s *Store) note(err error) {
	o := &s.out
	switch {
	case err == nil || isReply(err):
		if o.cur.Load() != nil {
			s.endOutage(nil)
		}
	case isRefused(err) && o.single.Load() && o.cur.Load() == nil:
		s.beginOutage(err)
	}
}

func (s *Store) beginOutage(err error) {
	o := &s.out
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cur.Load() != nil {
		return
	}
	r := &refusal{err: err, since: time.Now()}
	o.cur.Store(r)
	o.asked.Store(r.since.UnixNano())
	next := make(chan struct{})
	close(*o.notify.Swap(&next))
	s.logger.Error("redisstore: Redis refuses connections: claims fail at once, without waiting for the client's retries, until it accepts one again", "err", err)
	go s.probe(r)
}

// endOutage ends the outage r (any outage if nil), if it is still on.
func (s *Store) endOutage(r *refusal) {
	o := &s.out
	o.mu.Lock()
	defer o.mu.Unlock()
	cur := o.cur.Load()
	if cur == nil || (r != nil && cur != r) {
		return
	}
	o.cur.Store(nil)
	s.logger.Info("redisstore: Redis answers again", "after", time.Since(cur.since).Round(time.Millisecond))
}

// probe asks Redis, every outageProbe, whether it accepts connections again,
// until it answers, or nobody has claimed for a while, or the outage has
// lasted outageMax: then claims ask Redis again, and the first refused one
// begins the next outage.
func (s *Store) probe(r *refusal) {
	t := time.NewTimer(outageProbe)
	defer t.Stop()
	for {
		<-t.C
		if s.out.cur.Load() != r {
			return // a call got an answer
		}
		if time.Since(r.since) > outageMax || time.Since(time.Unix(0, s.out.asked.Load())) > outageIdle {
			s.out.mu.Lock()
			s.out.cur.CompareAndSwap(r, nil) // given up, quietly: the next refusal says so again
			s.out.mu.Unlock()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), outageProbeTime)
		err := s.client.ScriptExists(ctx, claimScript.Hash()).Err()
		cancel()
		if err == nil || isReply(err) {
			s.endOutage(r)
			return
		}
		t.Reset(outageProbe) // refused, or timed out within the client's retries: still down
	}
}
