package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkey/idemkey/observe"
)

// Response codes of records written by Do.
const (
	doSucceeded = 0 // Body is the function's result
	doFailed    = 1 // Body is the text of its error
)

// Result is the outcome of a successful [Store.Do].
type Result struct {
	// Data is the function's result, from this call or stored by an earlier
	// one. It is the caller's own: modifying it changes no later replay and
	// no other caller's Result, concurrent ones included.
	Data []byte
	// Replayed is true when the function did not run in this call.
	Replayed bool
}

// Do runs fn at most once for req's key across every process sharing the
// Redis deployment, and gives every call with the key fn's outcome. The first
// caller claims the key and runs fn while a heartbeat keeps its lease; later
// callers get the stored outcome (Result.Replayed), an *InProgressError while
// fn runs, ErrMismatch if req's fingerprint differs, or an *ExpiredError
// once only the outcome's tombstone is left.
//
// fn's outcome decides what is stored:
//   - (data, nil): data is stored and returned to every later call.
//   - an error marked with [Transient]: fn says it committed nothing. Nothing
//     is stored and the key is released, so the next call runs fn again.
//   - an error returned once fn's context is done (the caller's context
//     ended, MaxDuration passed, the lease was lost): fn may have done part
//     of its work, so its record is never forgotten. Nothing is stored and
//     only the lease ends: the next call takes the record over at once, with
//     Status TookOver and Attempt > 1, and can reconcile. Do marks the error
//     Transient.
//   - any other error: the failure is final and stored. Every call gets a
//     *FailedError (errors.Is ErrFailed) with its text; in the call that ran
//     fn it also wraps fn's error.
//   - a panic: the key is released and the panic continues; once fn's
//     context is done, only the lease ends, as for an error then.
//
// fn gets the lease: Attempt, RecoveryPoint and RecoveryData tell it whether a
// previous attempt ran and where it got to; Checkpoint records progress and
// DerivedKey gives keys for downstream providers. fn's context is derived
// from ctx; it is also cancelled, with cause ErrLeaseLost, if another caller
// takes the record over, and with cause ErrMaxDuration when
// Options.MaxDuration passes, after which the lease is no longer extended.
//
// If fn's outcome (a result or a final failure) cannot be stored (Redis
// unreachable, lease lost), Do says so in its error, with the Result if there
// is one; the record then stays started, and a retry after the lease takes it
// over with the last recovery point. An outcome stored but acknowledged by
// too few replicas (Options.Replicas) is returned with a *ReplicationError.
func (s *Store) Do(ctx context.Context, req Request, fn func(ctx context.Context, l *Lease) ([]byte, error)) (*Result, error) {
	c, err := s.Claim(ctx, req)
	if err != nil {
		s.observe(ctx, claimKind(err), &req, 0, 0, time.Time{}, err)
		return nil, err
	}
	if c.Status == Replayed {
		s.observe(ctx, observe.Replayed, &req, 0, c.Response.Code, time.Time{}, nil)
		switch c.Response.Code {
		case doSucceeded:
			// A copy: the body may be the cache's, or shared with collapsed calls.
			return &Result{Data: bytes.Clone(c.Response.Body), Replayed: true}, nil
		case doFailed:
			return nil, &FailedError{Message: string(c.Response.Body)}
		}
		return nil, fmt.Errorf("%w: record of key was not written by Do (code %d)", ErrUnexpectedReply, c.Response.Code)
	}
	return s.run(ctx, c.Lease, fn)
}

func (s *Store) run(ctx context.Context, l *Lease, fn func(context.Context, *Lease) ([]byte, error)) (*Result, error) {
	start := time.Now()
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := l.Supervise(cancel)
	// Once the heartbeat runs: an observer that blocks cannot let the lease
	// run out before fn has even started.
	kind := observe.Claimed
	if l.Attempt > 1 {
		kind = observe.TookOver
	}
	s.observe(ctx, kind, &l.req, l.Attempt, 0, time.Time{}, nil)
	data, panicked, err := call(fctx, l, fn)
	stop()

	// The outcome must reach Redis even if the caller has given up.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), max(s.opts.Lease, 2*time.Second))
	defer wcancel()
	var (
		res  *Result
		werr error // the store's error, for the observer
	)
	switch {
	case panicked != nil:
		if fctx.Err() != nil { // cut off: it may have done its work; its record is kept
			werr = l.Interrupt(wctx)
		} else {
			werr = l.Release(wctx)
		}
		s.observe(ctx, observe.Released, &l.req, l.Attempt, 0, start, werr)
		panic(panicked)
	case err == nil:
		res = &Result{Data: data}
		kind, werr = stored(l.Complete(wctx, Response{Code: doSucceeded, Body: data}))
		switch {
		case errors.Is(werr, ErrNotReplicated):
			err = fmt.Errorf("redisstore: do: outcome stored, but acknowledged by too few replicas: %w", werr)
		case werr != nil:
			err = fmt.Errorf("redisstore: do: outcome not stored: %w", werr)
		}
	case fctx.Err() != nil:
		kind, werr = observe.Released, l.Interrupt(wctx)
		if cause := context.Cause(fctx); cause != fctx.Err() && cause != nil {
			err = fmt.Errorf("%w (%w)", err, cause)
		}
		err = Transient(err)
	case IsTransient(err):
		kind, werr = observe.Released, l.Release(wctx)
	default:
		failed := &FailedError{Message: err.Error(), Err: err}
		kind, werr = stored(l.Complete(wctx, Response{Code: doFailed, Body: []byte(failed.Message)}))
		switch {
		case errors.Is(werr, ErrNotReplicated):
			err = fmt.Errorf("%w (stored, but acknowledged by too few replicas: %w)", failed, werr)
		case werr != nil:
			err = fmt.Errorf("%w (and the failure was not stored: %w)", failed, werr)
		default:
			err = failed
		}
	}
	s.observe(ctx, kind, &l.req, l.Attempt, 0, start, werr)
	return res, err
}

// stored says how a completion went, for the observer.
func stored(err error) (observe.Kind, error) {
	switch {
	case err == nil, errors.Is(err, ErrNotReplicated):
		return observe.Completed, err
	case errors.Is(err, ErrLeaseLost) && !errors.Is(err, ErrVanished):
		return observe.Fenced, err
	}
	return observe.NotStored, err
}

// claimKind says what a claim Do could not make was, for the observer.
func claimKind(err error) observe.Kind {
	switch {
	case errors.Is(err, ErrInProgress):
		return observe.InProgress
	case errors.Is(err, ErrMismatch):
		return observe.Mismatch
	case errors.Is(err, ErrExpired):
		return observe.Expired
	case errors.Is(err, ErrInvalidRequest):
		return observe.Rejected
	}
	return observe.Unavailable
}

// observe reports kind for req to the Observer, if any: the attempt, the
// stored status code and the store's error where known, and how long the
// run held the key when it started at start (not zero).
func (s *Store) observe(ctx context.Context, kind observe.Kind, req *Request, attempt, code int, start time.Time, err error) {
	if s.opts.Observer == nil {
		return
	}
	e := observe.NewEvent(kind, req.Scope, req.Key)
	e.Route, e.Attempt, e.Status, e.Err = req.Label, attempt, code, err
	if !start.IsZero() {
		e.Held = time.Since(start)
	}
	s.opts.Observer.Event(ctx, &e)
}

// call runs fn, turning a panic into a value.
func call(ctx context.Context, l *Lease, fn func(context.Context, *Lease) ([]byte, error)) (data []byte, panicked any, err error) {
	defer func() {
		if p := recover(); p != nil {
			panicked = p
		}
	}()
	data, err = fn(ctx, l)
	return data, nil, err
}
