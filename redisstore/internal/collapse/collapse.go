// Package collapse is the bookkeeping of a store's in-process collapse of
// duplicates: one flight per key at a time, which its leader settles with
// its claim's answer and ends with the run's outcome, and which followers
// join and wait on. What an answer means, and when a follower may use it,
// is the caller's.
//
// It knows nothing of package redisstore: a flight carries a claim of the
// caller's type C.
package collapse

import (
	"sync"
	"time"
)

// Holder is a run's hold on its key: Left is how long it holds its lease
// at least, by this process's clock.
type Holder interface{ Left() time.Duration }

// Group is the flights of one store, by key. The zero value is ready. It
// is safe for concurrent use.
//
// A flight whose Holder's lease is over and that was never ended (its
// lease dropped without an outcome, or its run stuck) is dead: Join
// sweeps dead flights out every so many new flights, so that none stays
// for the life of the process.
type Group[C any] struct {
	mu    sync.Mutex
	m     map[string]*Flight[C]
	added int // flights made since the last sweep
}

// Flight is one key's claim by this process, and then its run. Its
// channels are made only when somebody waits on them: most flights have no
// follower.
type Flight[C any] struct {
	fp        [16]byte
	isClaimed bool          // the leader's claim has its answer
	isDone    bool          // the flight ended
	claimed   chan struct{} // closed once isClaimed, if made
	done      chan struct{} // closed once isDone, if made
	waiting   int           // followers that waited for the claim (Claimed)

	// Set before claimed closes.
	claim C
	err   error
	held  Holder // the run's hold, once it owns the key
}

// sweepEvery is the fewest new flights between two sweeps.
const sweepEvery = 64

// Join returns key's flight and whether the caller leads it (a new
// flight). It returns nil when key's flight is for another fingerprint.
func (g *Group[C]) Join(key string, fp *[16]byte) (f *Flight[C], leader bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f = g.m[key]; f != nil {
		if !sameFP(&f.fp, fp) {
			return nil, false
		}
		return f, false
	}
	if g.m == nil {
		g.m = map[string]*Flight[C]{}
	}
	// A sweep costs a pass over the map once per as many new flights as it
	// holds: constant time per flight.
	if g.added++; g.added >= max(sweepEvery, len(g.m)) {
		g.added = 0
		for k, f := range g.m {
			if f.held != nil && f.held.Left() <= 0 {
				g.endLocked(k, f)
			}
		}
	}
	f = &Flight[C]{fp: *fp}
	g.m[key] = f
	return f, true
}

// Get returns key's flight for fp, if any.
func (g *Group[C]) Get(key string, fp *[16]byte) *Flight[C] {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f := g.m[key]; f != nil && sameFP(&f.fp, fp) {
		return f
	}
	return nil
}

// Len returns how many flights there are.
func (g *Group[C]) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.m)
}

// Settle records the leader's claim, c or err, for the followers, with
// the run's hold on the key when it owns it (else nil).
func (g *Group[C]) Settle(f *Flight[C], c C, err error, held Holder) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f.claim, f.err, f.held, f.isClaimed = c, err, held, true
	if f.claimed != nil {
		close(f.claimed)
	}
}

// End ends f, key's flight (its run ended, or it never owned the key),
// unless it ended already or was replaced.
func (g *Group[C]) End(key string, f *Flight[C]) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.endLocked(key, f)
}

// Drop ends key's flight, whatever its fingerprint, if there is one: its
// record is gone, and its followers ask again.
func (g *Group[C]) Drop(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f := g.m[key]; f != nil {
		g.endLocked(key, f)
	}
}

// endLocked is End, with g.mu held.
func (g *Group[C]) endLocked(key string, f *Flight[C]) {
	if g.m[key] != f {
		return
	}
	delete(g.m, key)
	f.isDone = true
	if f.done != nil {
		close(f.done)
	}
}

// closed is a channel that is always closed.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Claimed returns a channel closed once f's claim has its answer.
func (g *Group[C]) Claimed(f *Flight[C]) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f.isClaimed {
		return closed
	}
	if f.claimed == nil {
		f.claimed = make(chan struct{})
	}
	f.waiting++
	return f.claimed
}

// Waiting returns how many callers have waited for the claim of key's
// flight (Claimed before it had its answer); 0 without a flight.
func (g *Group[C]) Waiting(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f := g.m[key]; f != nil {
		return f.waiting
	}
	return 0
}

// Done returns a channel closed once f ends.
func (g *Group[C]) Done(f *Flight[C]) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f.isDone {
		return closed
	}
	if f.done == nil {
		f.done = make(chan struct{})
	}
	return f.done
}

// Held returns how long f's run holds its key at least, by this process's
// clock: 0 when it holds none.
func (g *Group[C]) Held(f *Flight[C]) time.Duration {
	g.mu.Lock()
	h := f.held
	g.mu.Unlock()
	if h == nil {
		return 0
	}
	return max(h.Left(), 0)
}

// Claim returns the leader's claim. Call it once Claimed's channel is
// closed.
func (f *Flight[C]) Claim() (C, error) { return f.claim, f.err }
