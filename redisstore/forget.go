package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/idemkey/idemkey/lua"
	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/redisstore/internal/record"
	"github.com/idemkey/idemkey/redisstore/internal/script"
)

// forgetScript waits for replicas (Options.Replicas): a forget a failover
// lost would bring the record back, and a forced one its owner's lease.
var forgetScript = script.New("forget", lua.Forget, true)

// Forget removes the record of scope and key and its tombstone, for an
// operator: the next request with the key runs the operation again, as a
// first attempt. It is for a stored outcome that must not be replayed any
// more, or a run that ended without one (its lease ran out, or was given
// back) whose history nobody needs.
//
// It refuses, with an *InProgressError (errors.Is ErrInProgress) and
// without changing anything, a started record whose lease is live: its
// owner is running, and a duplicate would run beside it. (For a lease
// longer than a second, a record whose lease ran out within a lease of a
// Redis restart counts as live, as it does for a claim: its owner may only
// have been cut off.) ForceForget removes such a record too.
//
// It returns ErrNotFound when there was neither record nor tombstone, and
// an error matching ErrUnexpectedReply, changing nothing, when the key
// holds something that is not an idemkey record. The Observer gets an
// observe.Forgotten event for what it removed. This process forgets the
// key too: its replay cache (Options.ReplayCacheBytes), and what it knows
// of a run of the key, so that its duplicates ask Redis again. Other
// processes' replay caches do not, and replay the outcome until their
// entry expires.
func (s *Store) Forget(ctx context.Context, scope, key string) error {
	return s.forget(ctx, scope, key, false)
}

// ForceForget is Forget that also removes a record whose lease is live,
// fencing its owner: the owner's Complete fails with ErrLeaseLost and
// stores nothing, as do its Checkpoint and Extend, so its heartbeat
// (Lease.Supervise, Store.Do, the middleware) cancels its run with cause
// ErrLeaseLost within Options.Heartbeat. No write of the old owner can bring
// the record back: each of them finds no record, or one of another token,
// and changes nothing. Processes waiting for the outcome (Store.Await, the
// middleware's Wait) are woken and claim again.
//
// Until its heartbeat tells it, the old owner keeps running, and the next
// request with the key runs beside it: use ForceForget only for an owner
// known to be stuck, whose side effect will not happen, or may happen
// twice.
func (s *Store) ForceForget(ctx context.Context, scope, key string) error {
	return s.forget(ctx, scope, key, true)
}

func (s *Store) forget(ctx context.Context, scope, key string, force bool) error {
	k := s.keys(scope, key)
	flag := "0"
	if force {
		flag = "1"
	}
	reply, err := s.call(ctx, nil, forgetScript, []string{k.Record(), k.Tombstone(), k.LegacyLease()},
		flag, strconv.FormatInt(s.opts.Lease.Milliseconds(), 10))
	var rerr *ReplicationError
	if err != nil && !errors.As(err, &rerr) {
		return fmt.Errorf("redisstore: forget: %w", err)
	}
	f, ok := record.DecodeForget(reply)
	if !ok {
		return unexpected("forget", reply)
	}
	switch f.Status {
	case record.ForgetNothing:
		return ErrNotFound
	case record.ForgetForeign:
		return fmt.Errorf("%w from forget: the key holds a %s that is not an idemkey record; left alone", ErrUnexpectedReply, f.Type)
	case record.ForgetRefused:
		return &InProgressError{LeaseLeft: f.LeaseLeft}
	}
	s.uncache(k.Record())
	// This process's duplicates ask Redis again, instead of being told of
	// a run whose record is gone.
	s.flights.Drop(k.Record())
	if s.opts.Observer != nil {
		s.observeForget(ctx, scope, key, f)
	}
	if rerr != nil {
		return rerr
	}
	return nil
}

// observeForget reports a forget, with what the forgotten record told: its
// label (Route), attempt and stored status, and Problem "forced" when it
// fenced a live lease.
func (s *Store) observeForget(ctx context.Context, scope, key string, f record.ForgetReply) {
	e := observe.NewEvent(observe.Forgotten, scope, key)
	if st, _, ok := record.ParseStarted(f.Record); ok {
		e.Route, e.Attempt = st.Label, st.Attempt
	} else if att, code, _, ok := record.ParseCompleted(f.Record); ok {
		e.Attempt, e.Status = att, code
	}
	if f.LeaseLeft > 0 {
		e.Problem = "forced"
	}
	s.opts.Observer.Event(ctx, &e)
}

// uncache drops the replay cache's entry for the record named key.
func (s *Store) uncache(key string) {
	if s.cache != nil {
		s.cache.Remove(key)
	}
}
