package redisstore

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkey/idemkey/redisstore/internal/record"
)

// In-process collapse: concurrent claims of one key in one process share one
// claim, and while this process runs the key's operation, its duplicates are
// answered here, without Redis. Redis stays the referee between processes;
// the flight only spares it the questions whose answer this process already
// knows.
//
// A flight whose lease is over by this process's clock and that was never
// ended (its lease dropped without Complete or Release, or its run stuck)
// is dead: the next claim of its key replaces it, and joins sweep dead
// flights out of the map every so many new flights, so that none stays
// for the life of the process.
type flights struct {
	mu    sync.Mutex
	m     map[string]*flight
	added int // flights made since the last sweep
}

// flight is one key's claim by this process, and then its run. Its
// channels are made only when somebody waits on them, under flights.mu:
// most flights have no follower.
type flight struct {
	fp        [record.FPLen]byte
	isClaimed bool          // the leader's claim has its answer
	isDone    bool          // the flight ended
	claimed   chan struct{} // closed once isClaimed, if made
	done      chan struct{} // closed once isDone, if made

	// Set before claimed closes.
	claim *Claim
	err   error

	// Set before done closes: the outcome, when the run stored one.
	resp *Response

	lease *Lease // the run's lease, once owned
}

// join returns the key's flight and whether the caller leads it (a new
// flight). It returns nil when the key's flight is for another fingerprint:
// only Redis can answer that claim.
func (fs *flights) join(key string, fp *[record.FPLen]byte) (f *flight, leader bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f = fs.m[key]; f != nil {
		if f.fp != *fp {
			return nil, false
		}
		return f, false
	}
	if fs.m == nil {
		fs.m = map[string]*flight{}
	}
	// A sweep costs a pass over the map once per as many new flights as it
	// holds: constant time per flight.
	if fs.added++; fs.added >= max(sweepEvery, len(fs.m)) {
		fs.added = 0
		for k, f := range fs.m {
			if f.dead() {
				fs.endLocked(k, f, nil)
			}
		}
	}
	f = &flight{fp: *fp}
	fs.m[key] = f
	return f, true
}

// sweepEvery is the fewest new flights between two sweeps.
const sweepEvery = 64

// dead reports whether f's run had a lease that is now over by this
// process's clock. Called with flights.mu held.
func (f *flight) dead() bool { return f.lease != nil && f.lease.left() <= 0 }

// owned returns how long f's run holds its lease at least, as far as this
// process knows: 0 when it holds none.
func (fs *flights) owned(f *flight) time.Duration {
	fs.mu.Lock()
	l := f.lease
	fs.mu.Unlock()
	if l == nil {
		return 0
	}
	return max(l.left(), 0)
}

// closed is a channel that is always closed.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// claimedChan returns a channel closed once f's claim has its answer.
func (fs *flights) claimedChan(f *flight) <-chan struct{} {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f.isClaimed {
		return closed
	}
	if f.claimed == nil {
		f.claimed = make(chan struct{})
	}
	return f.claimed
}

// doneChan returns a channel closed once f ends.
func (fs *flights) doneChan(f *flight) <-chan struct{} {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f.isDone {
		return closed
	}
	if f.done == nil {
		f.done = make(chan struct{})
	}
	return f.done
}

// settle records the leader's claim: its answer for the followers.
func (fs *flights) settle(f *flight, c *Claim, err error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f.claim, f.err, f.isClaimed = c, err, true
	if c != nil && c.Lease != nil {
		f.lease = c.Lease
	}
	if f.claimed != nil {
		close(f.claimed)
	}
}

// get returns the key's flight, if any.
func (fs *flights) get(key string) *flight {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.m[key]
}

// end ends f with resp, the outcome its run stored (nil for none).
func (fs *flights) end(key string, f *flight, resp *Response) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.endLocked(key, f, resp)
}

// endLocked is end, with fs.mu held.
func (fs *flights) endLocked(key string, f *flight, resp *Response) {
	if fs.m[key] != f {
		return // ended already, or replaced
	}
	delete(fs.m, key)
	f.resp, f.isDone = resp, true
	if f.done != nil {
		close(f.done)
	}
}

// collapse claims l's key, sharing one claim with the concurrent claims of
// the same key and fingerprint in this process.
func (s *Store) collapse(ctx context.Context, l *Lease) (*Claim, error) {
	key := l.keys.Record()
	for range 2 { // a dead flight is replaced once
		f, leader := s.flights.join(key, &l.fp)
		switch {
		case f == nil:
			return s.claim(ctx, l)
		case leader:
			return s.lead(ctx, l, f)
		}
		select {
		case <-s.flights.claimedChan(f):
		case <-ctx.Done():
			return nil, fmt.Errorf("redisstore: claim: %w", context.Cause(ctx))
		}
		var ip *InProgressError
		switch {
		case f.err == nil && f.claim.Status == Replayed:
			return &Claim{Status: Replayed, Response: f.claim.Response}, nil
		case f.err == nil:
			// This process runs the operation. Its lease is as good as
			// Redis's answer while its heartbeat keeps it; past that, the
			// flight is dead: replace it and ask Redis, which may let the
			// key be taken over (and the new run collapse its duplicates).
			if left := f.lease.left(); left > 0 {
				return nil, &InProgressError{LeaseLeft: left}
			}
			s.flights.end(key, f, nil)
			continue
		case errors.As(f.err, &ip), errors.Is(f.err, ErrMismatch), errors.Is(f.err, ErrExpired):
			return nil, f.err // Redis's answer for this key and fingerprint
		}
		return s.claim(ctx, l) // the leader failed (its context, Redis): ask for ourselves
	}
	return s.claim(ctx, l)
}

// lead claims l's key for the flight f it leads, and settles f with the answer.
func (s *Store) lead(ctx context.Context, l *Lease, f *flight) (*Claim, error) {
	c, err := s.claim(ctx, l)
	if c != nil && c.Lease != nil {
		c.Lease.flight = f
	}
	s.flights.settle(f, c, err)
	if c == nil || c.Lease == nil {
		var resp *Response
		if c != nil {
			resp = &c.Response
		}
		s.flights.end(l.keys.Record(), f, resp)
	}
	return c, err
}

// signed records a sign of life of the lease sent at t: a claim, extend or
// checkpoint that Redis acknowledged.
func (l *Lease) signed(t time.Time) { l.sign.Store(t.UnixNano()) }

// left returns how long the lease holds at least, by its last sign of life.
func (l *Lease) left() time.Duration {
	return l.store.opts.Lease - time.Since(time.Unix(0, l.sign.Load()))
}

// ended ends the lease's flight, with the stored outcome if there is one.
func (l *Lease) ended(resp *Response) {
	if l.flight != nil {
		l.store.flights.end(l.keys.Record(), l.flight, resp)
	}
	if resp != nil {
		// The record lives about the retention from the last sign of life
		// (completion keeps its TTL).
		l.store.remember(l, *resp, time.Unix(0, l.sign.Load()).Add(l.ret.d))
	}
}

// replayCache keeps completed outcomes this process has seen, so that their
// replays cost no round trip: bounded in bytes, each entry until its record
// expires in Redis, the least recently used first out (a key being retried
// stays while fresh outcomes come and go).
type replayCache struct {
	mu    sync.Mutex
	max   int
	size  int
	order *list.List // of *cached, least recently used first
	m     map[string]*list.Element
}

type cached struct {
	key     string
	fp      [record.FPLen]byte
	resp    Response
	expires time.Time
}

func (c *cached) cost() int { return len(c.key) + len(c.resp.Body) + 96 }

// cached returns the replay of l's key from the cache, if it holds one for
// l's fingerprint. A cached outcome for another fingerprint is left to
// Redis, which answers the mismatch.
func (s *Store) cached(l *Lease) (*Claim, bool) {
	rc := s.cache
	if rc == nil {
		return nil, false
	}
	key := l.keys.Record()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	e, ok := rc.m[key]
	if !ok {
		return nil, false
	}
	c := e.Value.(*cached)
	if time.Now().After(c.expires) {
		rc.remove(e)
		return nil, false
	}
	if c.fp != l.fp {
		return nil, false
	}
	rc.order.MoveToBack(e) // used now: the last to go
	return &Claim{Status: Replayed, Response: c.resp}, true
}

// remember caches resp as l's key's outcome until expires.
func (s *Store) remember(l *Lease, resp Response, expires time.Time) {
	rc := s.cache
	if rc == nil || time.Until(expires) <= 0 {
		return
	}
	c := &cached{key: l.keys.Record(), fp: l.fp, resp: resp, expires: expires}
	if c.cost() > rc.max {
		return
	}
	// The cache's own copy: the caller may reuse its buffer (Do's result,
	// the body given to Complete), and Redis keeps what it was sent.
	c.resp.Body = bytes.Clone(resp.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if e, ok := rc.m[c.key]; ok {
		rc.remove(e)
	}
	rc.m[c.key] = rc.order.PushBack(c)
	rc.size += c.cost()
	for rc.size > rc.max {
		rc.remove(rc.order.Front())
	}
}

func (rc *replayCache) remove(e *list.Element) {
	c := rc.order.Remove(e).(*cached)
	delete(rc.m, c.key)
	rc.size -= c.cost()
}
