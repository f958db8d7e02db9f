package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/idemkey/idemkey/redisstore/internal/wake"
)

// Await is Claim for a caller that would rather wait than be told "in
// progress": while another caller holds the key, it waits until the outcome
// is stored (and returns its replay) or the key is given back (and claims
// it), until ctx ends, when it returns the last *InProgressError. It never
// waits on a mismatch or any other error.
//
// A wait on an operation this process runs needs no Redis call while its
// lease holds by this process's clock; past that, Await asks Redis, which
// may have let another process take the key over and store its outcome. A
// wait on another process is woken through Redis pub/sub when the owner
// completes or releases: the waiter subscribes to the record's wake-up
// channel and marks the record, so that only records somebody waits for
// publish anything. When the client cannot subscribe, or a message is
// lost, Await polls instead, every 5ms doubling to 100ms without pub/sub and
// every 250ms with it.
func (s *Store) Await(ctx context.Context, req Request) (*Claim, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	backoff := 5 * time.Millisecond
	var last error // the last in-progress answer
	for {
		c, err := s.Claim(ctx, req)
		var ip *InProgressError
		if !errors.As(err, &ip) {
			if err != nil && last != nil && ctx.Err() != nil {
				return nil, last // the deadline fell inside this claim, not a wait
			}
			return c, err
		}
		last = err
		if !s.wait(ctx, s.newLease(req), &backoff) {
			return nil, err
		}
	}
}

// wait waits for l's key to change hands: its local run to end, or a
// wake-up, or the next poll. It returns false when ctx ends first.
func (s *Store) wait(ctx context.Context, l *Lease, backoff *time.Duration) bool {
	if f := s.flights.Get(l.keys.Record(), &l.fp); f != nil {
		if left := s.flights.Held(f); left > 0 {
			// Past what the run's lease has left by this process's clock,
			// only Redis knows: the run may be stuck without a heartbeat,
			// and another process may have taken the key over.
			return wake.Sleep(ctx, s.flights.Done(f), left)
		}
	}
	poll := *backoff
	*backoff = min(2**backoff, 100*time.Millisecond)
	return s.wake.Wait(ctx, l.keys.Channel(), poll, func() bool {
		reply, err := s.call(ctx, nil, watchScript, l.keys.One, string(l.fp[:]))
		return err == nil && reply == int64(0) // completed or free meanwhile: claim again now
	})
}
