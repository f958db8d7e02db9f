package wake

import (
	"context"
	"time"
)

// missed is how long a waiter subscribed to its channel waits before it
// asks again, in case the message was lost.
const missed = 250 * time.Millisecond

// Wait waits for a message on channel, and returns false if ctx ends
// first. Subscribed (w not nil, and Redis confirmed the subscription), it
// first calls changed, which asks Redis whether the key changed hands
// before the subscription (and marks it waited for), and returns at once
// if it did; else it waits for the message, or missed. Without pub/sub
// (w nil, or the subscription not confirmed), it waits poll.
func (w *Waker) Wait(ctx context.Context, channel string, poll time.Duration, changed func() bool) bool {
	if w != nil {
		if woken, stop := w.Watch(ctx, channel); woken != nil {
			defer stop()
			if changed() {
				return true
			}
			return Sleep(ctx, woken, missed)
		}
	}
	return Sleep(ctx, nil, poll)
}

// Sleep waits for woken (if not nil) or d, and returns false if ctx ends
// first.
func Sleep(ctx context.Context, woken <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-woken:
	case <-t.C:
	case <-ctx.Done():
		return false
	}
	return true
}
