package redisstore

import (
	"context"
	"errors"
	"fmt"
)

// ErrMaxDuration is the cause of the context cancellation a function run by
// [Store.Do] sees when it outlives Options.MaxDuration (see context.Cause).
var ErrMaxDuration = errors.New("redisstore: operation ran past its max duration")

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
// fn runs, or ErrMismatch if req's fingerprint differs.
//
// fn's outcome decides what is stored:
//   - (data, nil): data is stored and returned to every later call.
//   - an error marked with [Transient]: nothing is stored and the key is
//     released, so the next call runs fn again. Errors returned once fn's
//     context is done (the caller cancelled, MaxDuration passed, the lease was
//     lost) count as transient too, and Do marks them so.
//   - any other error: the failure is final and stored. Every call gets a
//     *FailedError (errors.Is ErrFailed) with its text; in the call that ran
//     fn it also wraps fn's error.
//   - a panic: the key is released and the panic continues.
//
// fn gets the lease: Attempt, RecoveryPoint and RecoveryData tell it whether a
// previous attempt died and where it got to; Checkpoint records progress and
// DerivedKey gives keys for downstream providers. fn's context is cancelled,
// with cause ErrLeaseLost, if another caller takes the record over, and with
// cause ErrMaxDuration when Options.MaxDuration passes, after which the lease
// is no longer extended.
//
// If fn's outcome (a result or a final failure) cannot be stored (Redis
// unreachable, lease lost), Do says so in its error, with the Result if there
// is one; the record then stays started, and a retry after the lease takes it
// over with the last recovery point.
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
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), s.lease)
	defer wcancel()
	switch {
	case panicked != nil:
		_ = l.Release(wctx)
		panic(panicked)
	case err == nil:
		if cerr := l.Complete(wctx, Response{Code: doSucceeded, Body: data}); cerr != nil {
			return &Result{Data: data}, fmt.Errorf("redisstore: do: outcome not stored: %w", cerr)
		}
		return &Result{Data: data}, nil
	case IsTransient(err):
		_ = l.Release(wctx)
		return nil, err
	case fctx.Err() != nil:
		_ = l.Release(wctx)
		if cause := context.Cause(fctx); cause != fctx.Err() && cause != nil {
			err = fmt.Errorf("%w (%w)", err, cause)
		}
		return nil, Transient(err)
	default:
		failed := &FailedError{Message: err.Error(), Err: err}
		if cerr := l.Complete(wctx, Response{Code: doFailed, Body: []byte(failed.Message)}); cerr != nil {
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
