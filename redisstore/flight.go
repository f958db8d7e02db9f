package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkey/idemkey/redisstore/internal/collapse"
)

// In-process collapse: concurrent claims of one key in one process share one
// claim, and while this process runs the key's operation, its duplicates are
// answered here, without Redis. Redis stays the referee between processes;
// the flight only spares it the questions whose answer this process already
// knows.
//
// A flight whose lease is over by this process's clock and that was never
// ended (its lease dropped without Complete or Release, or its run stuck)
// is dead: the next claim of its key replaces it, and the map's
// bookkeeping (internal/collapse) sweeps dead flights out.
type (
	flights = collapse.Group[*Claim]
	flight  = collapse.Flight[*Claim]
)

// collapse claims l's key, sharing one claim with the concurrent claims of
// the same key and fingerprint in this process.
func (s *Store) collapse(ctx context.Context, l *Lease) (*Claim, error) {
	key := l.keys.Record()
	for range 2 { // a dead flight is replaced once
		f, leader := s.flights.Join(key, &l.fp)
		switch {
		case f == nil:
			return s.claim(ctx, l)
		case leader:
			return s.lead(ctx, l, f)
		}
		select {
		case <-s.flights.Claimed(f):
		case <-ctx.Done():
			return nil, fmt.Errorf("redisstore: claim: %w", context.Cause(ctx))
		}
		c, err := f.Claim()
		var ip *InProgressError
		switch {
		case err == nil && c.Status == Replayed:
			return &Claim{Status: Replayed, Response: c.Response}, nil
		case err == nil:
			// This process runs the operation. Its lease is as good as
			// Redis's answer while its heartbeat keeps it; past that, the
			// flight is dead: replace it and ask Redis, which may let the
			// key be taken over (and the new run collapse its duplicates).
			if left := s.flights.Held(f); left > 0 {
				return nil, &InProgressError{LeaseLeft: left}
			}
			s.flights.End(key, f)
			continue
		case errors.As(err, &ip), errors.Is(err, ErrMismatch), errors.Is(err, ErrExpired):
			return nil, err // Redis's answer for this key and fingerprint
		}
		return s.claim(ctx, l) // the leader failed (its context, Redis): ask for ourselves
	}
	return s.claim(ctx, l)
}

// lead claims l's key for the flight f it leads, and settles f with the answer.
func (s *Store) lead(ctx context.Context, l *Lease, f *flight) (*Claim, error) {
	c, err := s.claim(ctx, l)
	if c == nil || c.Lease == nil {
		s.flights.Settle(f, c, err, nil)
		s.flights.End(l.keys.Record(), f)
		return c, err
	}
	c.Lease.flight = f
	s.flights.Settle(f, c, err, (*holder)(c.Lease))
	return c, err
}

// holder is a Lease as its flight's collapse.Holder: a *Lease converts to
// a *holder at no cost, and Left stays off Lease's public methods.
type holder Lease

// Left is how long the lease holds at least, by its last sign of life.
func (h *holder) Left() time.Duration { return h.sign.Left(h.store.opts.Lease) }

// Extend is a heartbeat (timers.Held): lost when Redis says so.
func (h *holder) Extend(ctx context.Context) (bool, error) {
	err := (*Lease)(h).Extend(ctx)
	return errors.Is(err, ErrLeaseLost), err
}

// Lost hands back a claim whose answer was lost (script.Lost): a *Lease
// converts to a *holder at no cost, where the method value l.handBack
// would be an allocation per claim.
func (h *holder) Lost() { (*Lease)(h).handBack() }

// Expire marks the lease past MaxDuration: no sign of life pushes it out
// any more (Extend, Checkpoint).
func (h *holder) Expire() { h.over.Store(true) }

// ended ends the lease's flight, with the stored outcome if there is one.
func (l *Lease) ended(resp *Response) {
	if l.flight != nil {
		l.store.flights.End(l.keys.Record(), l.flight)
	}
	if resp != nil {
		// The record lives about the retention from the last sign of life
		// (completion keeps its TTL).
		l.store.remember(l, *resp, l.sign.Time().Add(l.ret.D))
	}
}

// The replay cache (Options.ReplayCacheBytes; internal/lru) spares a round
// trip to replays of outcomes this process has seen, until they expire.

// cached returns the replay of l's key from the cache, if it holds one for
// l's fingerprint.
func (s *Store) cached(l *Lease) (*Claim, bool) {
	if s.cache == nil {
		return nil, false
	}
	o, ok := s.cache.Replay(l.keys.Record(), &l.fp)
	if !ok {
		return nil, false
	}
	return &Claim{Status: Replayed, Response: Response{Code: o.Code, Body: o.Body}}, true
}

// remember caches resp as l's key's outcome until expires.
func (s *Store) remember(l *Lease, resp Response, expires time.Time) {
	if s.cache != nil {
		s.cache.Keep(l.keys.Record(), &l.fp, resp.Code, resp.Body, expires)
	}
}
