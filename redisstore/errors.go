package redisstore

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrInProgress means another caller holds the lease on the key: the
	// operation is running. The error is an *InProgressError.
	ErrInProgress = errors.New("redisstore: request in progress")

	// ErrMismatch means the key was first used with another fingerprint:
	// the client reused a key for a different request. The record is untouched.
	ErrMismatch = errors.New("redisstore: key reused with a different fingerprint")

	// ErrLeaseLost means the caller's token no longer owns the record: its
	// lease ran out and another caller took over, the record was completed or
	// released, or it expired or vanished (ErrVanished). Nothing was written.
	ErrLeaseLost = errors.New("redisstore: lease lost")

	// ErrVanished means the record was gone when its owner wrote to it; such
	// an error matches ErrLeaseLost too. The store logs the likely cause
	// (evicted, flushed, Redis restarted), once per cause per minute.
	ErrVanished = errors.New("redisstore: the record vanished (evicted, flushed, or Redis restarted without persistence)")

	// ErrNotFound means no record exists for the scope and key.
	ErrNotFound = errors.New("redisstore: record not found")

	// ErrInvalidRequest means a Request's key is empty or too long, or its
	// scope, fingerprint or label is too long. Nothing was sent to Redis.
	ErrInvalidRequest = errors.New("redisstore: invalid request")

	// ErrFailed means the operation ran and its final outcome was a failure,
	// stored by [Store.Do]. The error is a *FailedError.
	ErrFailed = errors.New("redisstore: operation failed")

	// ErrExpired means the key's outcome expired and only its tombstone is
	// left (Options.TombstoneRetention): the operation ran, and will not run
	// again with this key. The error is an *ExpiredError.
	ErrExpired = errors.New("redisstore: outcome expired")

	// ErrUnexpectedReply means Redis answered a script with a reply of a shape
	// the store does not know: a script from another version, or a key that
	// something else overwrote.
	ErrUnexpectedReply = errors.New("redisstore: unexpected reply")

	// ErrEvicting means the store refuses to serve because Redis may evict
	// records (Options.RequireNoEviction): a master's maxmemory-policy is not
	// noeviction, and a maxmemory is set. An evicted record is forgotten, and a
	// retry of its operation runs it again. Set maxmemory-policy noeviction.
	ErrEvicting = errors.New("redisstore: Redis may evict records (maxmemory-policy is not noeviction)")

	// ErrNoPersistence means the store refuses to serve because a master
	// has neither AOF nor RDB (Options.RequirePersistence): a restart would
	// forget every record. Set appendonly yes.
	ErrNoPersistence = errors.New("redisstore: Redis does not persist records (neither AOF nor RDB)")

	// ErrMaxDuration is the cause of the context cancellation a function run by
	// [Store.Do] sees when it outlives Options.MaxDuration (see context.Cause).
	ErrMaxDuration = errors.New("redisstore: operation ran past its max duration")

	// ErrNotReplicated means fewer replicas than Options.Replicas acknowledged a
	// write within Options.ReplicaTimeout, so a failover could lose it. A claim
	// that is not replicated is released before Claim returns: nothing has run.
	// The error is a *ReplicationError.
	ErrNotReplicated = errors.New("redisstore: write not acknowledged by enough replicas")
)

// ReplicationError reports how many replicas acknowledged a write. It matches
// ErrNotReplicated with errors.Is.
type ReplicationError struct {
	// Acked is how many replicas acknowledged the write in time.
	Acked int
	// Want is Options.Replicas.
	Want int
}

// Error says how many replicas acknowledged the write.
func (e *ReplicationError) Error() string {
	return fmt.Sprintf("redisstore: write acknowledged by %d of %d replicas", e.Acked, e.Want)
}

// Is reports whether target is ErrNotReplicated.
func (e *ReplicationError) Is(target error) bool { return target == ErrNotReplicated }

// ExpiredError is returned by [Store.Claim] and [Store.Do] for a key whose
// outcome has expired but whose tombstone remains. It matches ErrExpired
// with errors.Is.
type ExpiredError struct {
	// Code is the stored outcome's code (an HTTP status, for the middleware),
	// or 0 if it was outside 0 to 1023.
	Code int
	// Attempts is how many attempts ran (capped at 255).
	Attempts int
}

// Error says the outcome expired.
func (e *ExpiredError) Error() string {
	return fmt.Sprintf("redisstore: outcome expired (code %d, after %d attempts); only its tombstone is left", e.Code, e.Attempts)
}

// Is reports whether target is ErrExpired.
func (e *ExpiredError) Is(target error) bool { return target == ErrExpired }

// InProgressError is returned by [Store.Claim] and [Store.Do] while another
// caller holds the lease. It matches ErrInProgress with errors.Is.
type InProgressError struct {
	// LeaseLeft is how long the current owner's lease still runs. The owner
	// usually finishes long before it ends; it is an upper bound on how long a
	// crashed owner blocks the key, not a good retry delay.
	LeaseLeft time.Duration
}

// Error says the request is in progress and how long the lease has left.
func (e *InProgressError) Error() string {
	return fmt.Sprintf("redisstore: request in progress (lease has %v left)", e.LeaseLeft)
}

// Is reports whether target is ErrInProgress.
func (e *InProgressError) Is(target error) bool { return target == ErrInProgress }

// FailedError is the final failure of an operation run by [Store.Do], as
// every caller gets it: the one that ran the function (Err is then the
// function's error) and every duplicate after it (Err is then nil; only the
// message was stored). It matches ErrFailed with errors.Is.
type FailedError struct {
	// Message is the text of the error the function returned.
	Message string
	// Err is the function's error itself, in the call that ran it; nil in
	// the replays.
	Err error
}

// Error returns the stored message with the package prefix.
func (e *FailedError) Error() string { return "redisstore: operation failed: " + e.Message }

// Is reports whether target is ErrFailed.
func (e *FailedError) Is(target error) bool { return target == ErrFailed }

// Unwrap returns Err.
func (e *FailedError) Unwrap() error { return e.Err }

// transientError marks an error as transient; see Transient.
type transientError struct{ err error }

func (e transientError) Error() string { return e.err.Error() }
func (e transientError) Unwrap() error { return e.err }

// Transient marks err as transient for [Store.Do]: nothing was committed, so
// the key is released and the next call runs the function again. Transient(nil)
// is nil.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return transientError{err}
}

// IsTransient reports whether err, or an error it wraps, was marked with Transient.
func IsTransient(err error) bool {
	var t transientError
	return errors.As(err, &t)
}
