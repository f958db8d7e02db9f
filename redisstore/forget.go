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
// entry expires; nor do their Observers hear of it (a forget made with
// "idemkey forget" reaches no application's Observer: the command prints
// an audit line instead).
func (s *Store) Forget(ctx context.Context, scope, key string) error {
	return s.forget(ctx, s.keys(scope, key), scope, key, false)
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
	return s.forget(ctx, s.keys(scope, key), scope, key, true)
}

// ForgetName is Forget for the record named name in Redis, as Scan
// (Scanned.Name) and "idemkey ls" show it: for an operator who found a
// stuck record by its name and knows neither its scope nor its key (the
// record keeps neither). It removes the record's tombstone too, and refuses
// a live lease as Forget does. It returns a *NameError (errors.Is
// ErrInvalidRequest), sending nothing to Redis, when name is not a record's
// name under Options.Prefix (a tombstone's, another application's key).
// Other errors, the Observer's event and what this process forgets are as
// for Forget; the event has no key, so its KeyHash is "".
func (s *Store) ForgetName(ctx context.Context, name string) error {
	k, err := s.named(name)
	if err != nil {
		return err
	}
	return s.forget(ctx, k, "", "", false)
}

// ForceForgetName is ForgetName that also removes a record whose lease is
// live, fencing its owner, as ForceForget does; the same warning holds.
func (s *Store) ForceForgetName(ctx context.Context, name string) error {
	k, err := s.named(name)
	if err != nil {
		return err
	}
	return s.forget(ctx, k, "", "", true)
}

// LookupName is Lookup for the record named name in Redis (see ForgetName);
// the Record's Scope and Key are empty. It changes nothing. It returns a
// *NameError when name is not a record's name under Options.Prefix, and
// ErrNotFound when there is no record.
func (s *Store) LookupName(ctx context.Context, name string) (*Record, error) {
	k, err := s.named(name)
	if err != nil {
		return nil, err
	}
	reply, err := s.call(ctx, nil, lookupScript, k.One)
	if err != nil {
		return nil, fmt.Errorf("redisstore: lookup: %w", err)
	}
	return found(reply)
}

// RecordName returns the name in Redis of the record of scope and key, as
// Scan and "idemkey ls" show it: the prefix and a hash of both, which
// names the record without revealing either. It does not talk to Redis.
func (s *Store) RecordName(scope, key string) string { return s.keys(scope, key).Record() }

// NameError is returned by ForgetName, ForceForgetName and LookupName for a
// name that is not the name of a record under the store's prefix. It
// matches ErrInvalidRequest with errors.Is.
type NameError struct {
	// Name is the name given.
	Name string
	// Prefix is the store's Options.Prefix.
	Prefix string
	// Reason says what the name is instead.
	Reason string
}

// Error names the name, quoted, and says why it is not a record's.
func (e *NameError) Error() string {
	return fmt.Sprintf("redisstore: %q is not the name of a record under prefix %q: %s", e.Name, e.Prefix, e.Reason)
}

// Is reports whether target is ErrInvalidRequest.
func (e *NameError) Is(target error) bool { return target == ErrInvalidRequest }

// named returns the keys of the record named name, or a *NameError.
func (s *Store) named(name string) (record.Keys, error) {
	k, why := record.ParseName(s.opts.Prefix, name)
	if why != "" {
		return k, &NameError{Name: name, Prefix: s.opts.Prefix, Reason: why}
	}
	return k, nil
}

func (s *Store) forget(ctx context.Context, k record.Keys, scope, key string, force bool) error {
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
	e.Route, e.Attempt, e.Status = f.Facts()
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
