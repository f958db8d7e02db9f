package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Response codes of records written by Do.
const (
	doSucceeded = 0 // Body is the function's result
	doFailed    = 1 // Body is the text of its error
)

// Result is the outcome of a successful [Store.Do].
type Result struct {
	// Data is the function's result, from this call or stored by an earlier one.
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
//   - a panic: the key is released and the panic continues.
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
		return nil, err
	}
	if c.Status == Replayed {
		switch c.Response.Code {
		case doSucceeded:
			return &Result{Data: c.Response.Body, Replayed: true}, nil
		case doFailed:
			return nil, &FailedError{Message: string(c.Response.Body)}
		}
		return nil, fmt.Errorf("%w: record of key was not written by Do (code %d)", ErrUnexpectedReply, c.Response.Code)
	}
	return s.run(ctx, c.Lease, fn)
}

func (s *Store) run(ctx context.Context, l *Lease, fn func(context.Context, *Lease) ([]byte, error)) (*Result, error) {
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := l.Supervise(cancel)
	data, panicked, err := call(fctx, l, fn)
	stop()

	// The outcome must reach Redis even if the caller has given up.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), max(s.lease, 2*time.Second))
	defer wcancel()
	switch {
	case panicked != nil:
		_ = l.Release(wctx)
		panic(panicked)
	case err == nil:
		cerr := l.Complete(wctx, Response{Code: doSucceeded, Body: data})
		switch {
		case errors.Is(cerr, ErrNotReplicated):
			return &Result{Data: data}, fmt.Errorf("redisstore: do: outcome stored, but acknowledged by too few replicas: %w", cerr)
		case cerr != nil:
			return &Result{Data: data}, fmt.Errorf("redisstore: do: outcome not stored: %w", cerr)
		}
		return &Result{Data: data}, nil
	case fctx.Err() != nil:
		_ = l.release(wctx, true)
		if cause := context.Cause(fctx); cause != fctx.Err() && cause != nil {
			err = fmt.Errorf("%w (%w)", err, cause)
		}
		return nil, Transient(err)
	case IsTransient(err):
		_ = l.Release(wctx)
		return nil, err
	default:
		failed := &FailedError{Message: err.Error(), Err: err}
		cerr := l.Complete(wctx, Response{Code: doFailed, Body: []byte(failed.Message)})
		switch {
		case errors.Is(cerr, ErrNotReplicated):
			return nil, fmt.Errorf("%w (stored, but acknowledged by too few replicas: %w)", failed, cerr)
		case cerr != nil:
			return nil, fmt.Errorf("%w (and the failure was not stored: %w)", failed, cerr)
		}
		return nil, failed
	}
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
