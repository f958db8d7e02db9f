package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/idemkey/idemkey/redisstore/internal/record"
	"github.com/idemkey/idemkey/redisstore/internal/script"
	"github.com/idemkey/idemkey/redisstore/internal/timers"
)

// Lease is a caller's ownership of one record, from a successful claim until
// it completes or releases it. Every write it makes is fenced by its token:
// once another caller has taken the record over, they fail with ErrLeaseLost
// and change nothing.
//
// Its methods are safe for concurrent use (a heartbeat may extend the lease
// while the owner checkpoints); its exported fields are set by the claim
// and never change (Checkpoint does not update RecoveryPoint).
type Lease struct {
	store     *Store
	req       Request
	keys      record.Keys
	token     string
	tokenArg  any // &token: a pointer, so that it costs no allocation in a call's arguments
	fp        [record.FPLen]byte
	label     string      // the record's: the first claim's label
	createdMS int64       // the record's: when it was first claimed
	flight    *flight     // this process's flight for the key, when collapsing
	ret       *retention  // the record's retention: the request's, or the store's
	sign      timers.Sign // when the last acknowledged sign of life was sent
	over      atomic.Bool // MaxDuration has passed (holder.Expire): no more signs of life

	// The started record the claim sends, in startedBuf when it fits: the
	// claim's arguments point at it, which costs no allocation.
	started    script.Bytes
	startedBuf [128]byte

	// The lease's first supervision (Supervise), inside it: no allocation.
	sup     timers.Supervision
	supUsed atomic.Bool

	// Attempt is 1 for a fresh claim, plus one per takeover.
	Attempt int

	// RecoveryPoint is the last point a previous owner recorded with
	// Checkpoint before it lost the record; empty on a fresh claim or when
	// it recorded none. Checkpoint does not change it.
	RecoveryPoint string

	// RecoveryData is the data checkpointed with RecoveryPoint.
	RecoveryData []byte
}

// Complete stores resp as the operation's outcome, which every later claim of
// the key gets as a replay, and drops the lease; the record then lives for the
// store's retention. The side effect has happened by now, so Complete tries
// hard: if Redis cannot be reached it tries again with backoff until ctx is
// done. A repeat by the same lease is harmless, so a lost reply costs
// nothing. It returns ErrLeaseLost if the record is no longer this lease's
// (ErrVanished if it is gone), and a *ReplicationError if the outcome was
// stored but too few replicas acknowledged it.
func (l *Lease) Complete(ctx context.Context, resp Response) error {
	s := l.store
	rec := script.Bytes(record.AppendCompleted(make([]byte, 0, record.OffCompletedTail+24+len(resp.Body)), &l.fp, l.Attempt, resp.Code, resp.Body))
	keys, args := l.keys.One, [4]any{&rec, l.tokenArg}
	argv := args[:2]
	if s.opts.TombstoneRetention > 0 {
		keys = []string{l.keys.Record(), l.keys.Tombstone()}
		args[2], args[3] = record.Tombstone(&l.fp, resp.Code, l.Attempt), l.ret.Tombstone
		argv = args[:4]
	}
	err := persist(ctx, func() error {
		reply, err := s.call(ctx, nil, completeScript, keys, argv...)
		if err == nil {
			return owned("complete", reply, nil) // not ownedReplicated: its errors.As costs an allocation
		}
		return ownedReplicated("complete", reply, err)
	})
	if err == nil || errors.Is(err, ErrNotReplicated) {
		l.ended(&resp)
	} else {
		err = l.gone(ctx, "complete", err)
		l.ended(nil)
	}
	return err
}

// gone makes err, of op that found the record not this lease's, ErrVanished
// when the record is gone (check.Startup.Gone looks, and logs it).
func (l *Lease) gone(ctx context.Context, op string, err error) error {
	if errors.Is(err, ErrLeaseLost) && l.store.env.Gone(ctx, op, l.keys.Record(), time.Since(l.sign.Time())) {
		return fmt.Errorf("%w: %w", ErrLeaseLost, ErrVanished)
	}
	return err
}

// Release gives the key up without an outcome, for a failure that committed
// nothing: the next claim runs the operation again. A record with history
// keeps it and only the lease ends, so that the next claim takes over at
// once, as the next attempt: a record taken over (Attempt > 1), or one with
// a recovery point. Like Complete, it tries again while Redis cannot be
// reached. Releasing a record that no longer exists succeeds; it returns
// ErrLeaseLost if another lease owns the record or it was completed.
func (l *Lease) Release(ctx context.Context) error { return l.release(ctx, false) }

// Interrupt ends the lease of a run that was stopped before it finished
// (shutdown, MaxDuration, a lost deadline) and may have done part of its
// work: unlike Release, it keeps the record and its history in every case,
// so the next claim takes the key over at once as the next attempt
// (Attempt > 1), from the last checkpoint, not as a fresh first attempt.
// Like Release, it tries again while Redis cannot be reached; it returns
// ErrLeaseLost if another lease owns the record or it was completed.
func (l *Lease) Interrupt(ctx context.Context) error { return l.release(ctx, true) }

// release is Release; keep keeps the record in any case, for a run that
// may have done part of its work.
func (l *Lease) release(ctx context.Context, keep bool) error {
	flag := "0"
	if keep {
		flag = "1"
	}
	err := persist(ctx, func() error {
		reply, err := l.store.call(ctx, nil, releaseScript, l.keys.One, l.tokenArg, flag)
		return owned("release", reply, err)
	})
	l.ended(nil)
	return err
}

// handBack gives back a claim whose answer was lost (script.HandBack).
// Release is fenced, so it is harmless if the claim never took effect.
func (l *Lease) handBack() {
	script.HandBack(l.store.opts.Lease, l.store.out.Refusal, func(ctx context.Context) bool {
		return errors.Is(l.release(ctx, false), ErrLeaseLost)
	})
}

// persist runs a write that is safe to repeat until it reaches Redis
// (script.Persist): the store's answers are final, as Redis's are.
func persist(ctx context.Context, write func() error) error {
	return script.Persist(ctx, write, ErrLeaseLost, ErrUnexpectedReply, ErrNotReplicated)
}

// Extend pushes the lease out to the store's full lease duration from now
// (and the record's retention with it). It returns ErrLeaseLost if the record
// is no longer this lease's, and ErrMaxDuration, without a call, once
// Options.MaxDuration has passed for a supervised lease.
func (l *Lease) Extend(ctx context.Context) error {
	if l.over.Load() {
		return fmt.Errorf("redisstore: extend: %w", ErrMaxDuration)
	}
	sent := time.Now()
	reply, err := l.store.call(ctx, nil, extendScript, l.keys.One, l.tokenArg, l.ret.MS)
	if err = owned("extend", reply, err); err == nil {
		l.sign.Set(sent)
	}
	return l.gone(ctx, "extend", err)
}

// Checkpoint records that the operation reached point, with data a later
// owner needs to resume from there (a charge ID, say), and pushes the lease
// out. A caller that takes the record over finds them in its Lease's
// RecoveryPoint and RecoveryData; past Options.MaxDuration it records the
// point but keeps the record's TTL. It returns ErrLeaseLost if the record
// is no longer this lease's, and a *ReplicationError if the checkpoint was
// stored but too few replicas acknowledged it.
func (l *Lease) Checkpoint(ctx context.Context, point string, data []byte) error {
	s := l.store
	rec := record.AppendStarted(make([]byte, 0, 64+len(point)+len(data)+len(l.label)), &l.fp, l.token, l.ret.Threshold,
		&record.Started{Attempt: l.Attempt, RecoveryPoint: point, RecoveryData: data, Label: l.label, CreatedMS: l.createdMS})
	sent, over, args := time.Now(), l.over.Load(), [4]any{l.tokenArg, rec, l.ret.MS, "keep"}
	argv := args[:3]
	if over {
		argv = args[:4] // past MaxDuration: the record keeps its TTL
	}
	reply, err := s.call(ctx, nil, checkpointScript, l.keys.One, argv...)
	err = ownedReplicated("checkpoint", reply, err)
	if !over && (err == nil || errors.Is(err, ErrNotReplicated)) {
		l.sign.Set(sent)
	}
	return l.gone(ctx, "checkpoint", err)
}

// DerivedKey returns an idempotency key for one step of the operation to hand
// to a downstream provider (a payment API, say): the same for every attempt
// and takeover of this operation, and different for every other (prefix,
// scope, key, step). Providers scope keys by our account, not by our callers,
// so the client's key plus a suffix would let two callers' equal keys collide
// there; this key cannot. It is 32 characters of base64url and reveals
// nothing of the scope or key.
func (l *Lease) DerivedKey(step string) string {
	return record.DerivedKey(l.store.opts.Prefix, l.req.Scope, l.req.Key, step)
}

// Supervise watches over an operation running on the lease, whose context
// cancel cancels: it keeps the lease alive with a heartbeat every
// Options.Heartbeat and cancels with cause ErrLeaseLost if the lease is lost
// (Redis says another caller took it over, or no beat reached Redis before
// the lease ran out); with Options.MaxDuration set, once that passes it
// stops extending the lease, so a stuck operation cannot hold the key, and
// cancels with cause ErrMaxDuration. stop ends the watch, waiting for a cancel in progress (so cancel must
// not call stop); call it when the operation returns, before completing or
// releasing the lease.
//
// Nothing runs for an operation shorter than one heartbeat: the store keeps
// every supervised lease's next beat (or MaxDuration) on one timer, so a
// watch costs a place in that queue, not a timer or a goroutine of its own.
func (l *Lease) Supervise(cancel context.CancelCauseFunc) (stop func()) {
	return l.supervise(cancel, nil, l.store.opts.MaxDuration).Stop
}

// supervise starts a supervision of l, with MaxDuration maxDur if
// positive. The first supervision of a lease is the one inside it; another
// (a second Supervise) is allocated.
func (l *Lease) supervise(cancel context.CancelCauseFunc, onLost func(), maxDur time.Duration) *timers.Supervision {
	s := &l.sup
	if !l.supUsed.CompareAndSwap(false, true) {
		s = &timers.Supervision{}
	}
	s.Held, s.Cancel, s.OnLost, s.LostCause, s.OverCause = (*holder)(l), cancel, onLost, ErrLeaseLost, ErrMaxDuration
	s.Supervise(l.store.beats, l.store.opts.Heartbeat, maxDur)
	return s
}
