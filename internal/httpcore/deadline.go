package httpcore

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The Redis calls of a request (its claim, its completion) are each bounded
// by a deadline at a fixed distance from their start: Timeout, or the
// longer of Timeout and the lease. context.WithTimeout would give each a
// timer, a channel and three more allocations, and tie the claim's context
// into the request's. Here a call's context is one small value whose Done
// channel a clock shares with every call whose deadline falls within the
// same tick, so a clock costs one channel and one timer wake-up per tick
// that has calls, however many.

// clock hands out the Done channels of deadlines a fixed distance from now.
// The channel of a deadline closes at the end of its tick: not before the
// deadline, and at most one tick after it. The call itself ends at the
// deadline to the nanosecond: go-redis sets the connection's deadline from
// the context's Deadline (ContextTimeoutEnabled); Done bounds what waits
// on a channel (a pool's free connection, a call the store waits for on
// another goroutine). A clock is safe for concurrent use.
//
// Ticks are measured from the clock's base on the monotonic clock: a step
// of the system clock moves no deadline.
type clock struct {
	d    time.Duration // from a call's start to its deadline
	tick time.Duration
	base time.Time // ends are durations since base

	cur   atomic.Pointer[tick] // the latest tick handed out
	mu    sync.Mutex
	open  []*tick // ticks not yet closed, by end
	timer *time.Timer
	armed time.Duration // the end the timer is armed for; 0: not armed
}

// tick is the channel of the deadlines that end by end (since the clock's
// base).
type tick struct {
	end  time.Duration
	done chan struct{}
}

// newClock returns the clock of deadlines d from now, in ticks of d/256
// (at least a millisecond): for a Timeout of 2s, deadlines close at most
// 8ms late.
func newClock(d time.Duration) *clock {
	return &clock{d: d, tick: max(d/256, time.Millisecond), base: time.Now()}
}

// at returns the deadline of a call starting now, and its Done channel.
func (c *clock) at(now time.Time) (time.Time, <-chan struct{}) {
	deadline := now.Add(c.d)
	dl := deadline.Sub(c.base)
	if t := c.cur.Load(); t != nil && t.end >= dl && t.end-dl < c.tick {
		return deadline, t.done
	}
	return deadline, c.slow(dl)
}

// slow finds or opens the tick of dl.
func (c *clock) slow(dl time.Duration) chan struct{} {
	tk := c.tick
	end := max((dl+tk-1)/tk*tk, tk) // never 0: armed 0 is not armed
	c.mu.Lock()
	defer c.mu.Unlock()
	i, found := slices.BinarySearchFunc(c.open, end, func(t *tick, end time.Duration) int {
		switch {
		case t.end < end:
			return -1
		case t.end > end:
			return 1
		}
		return 0
	})
	if found {
		return c.open[i].done
	}
	t := &tick{end: end, done: make(chan struct{})}
	c.open = slices.Insert(c.open, i, t)
	if i == len(c.open)-1 {
		c.cur.Store(t)
	}
	if c.armed == 0 || end < c.armed {
		c.arm(end)
	}
	return t.done
}

// arm sets the timer for end; c.mu is held.
func (c *clock) arm(end time.Duration) {
	c.armed = end
	wait := end - time.Since(c.base)
	if c.timer == nil {
		c.timer = time.AfterFunc(wait, c.expire)
		return
	}
	c.timer.Reset(wait)
}

// expire closes the ticks that have ended, and arms the timer for the next.
func (c *clock) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Since(c.base)
	n := 0
	for n < len(c.open) && c.open[n].end <= now {
		close(c.open[n].done)
		n++
	}
	clear(c.open[:n])
	c.open = c.open[n:]
	if len(c.open) == 0 {
		c.open, c.armed = nil, 0 // the backing array goes with the ticks' pointers
		return
	}
	c.arm(c.open[0].end)
}

// callCtx is the context of one Redis call: the values of parent, and the
// deadline and Done channel of a clock. Nothing else cancels it: a claim
// whose client has gone is not sent (Begin checks first), and one in
// flight ends by its deadline as it would have anyway (go-redis does not
// interrupt a call on cancellation).
type callCtx struct {
	parent   context.Context
	deadline time.Time
	done     <-chan struct{}
}

var _ context.Context = (*callCtx)(nil)

// init readies c for a call starting now on clock k, with parent's values.
func (c *callCtx) init(parent context.Context, k *clock) {
	c.parent = parent
	c.deadline, c.done = k.at(time.Now())
}

// Deadline returns the call's deadline.
func (c *callCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// Done returns a channel closed once the deadline has passed.
func (c *callCtx) Done() <-chan struct{} { return c.done }

// Err returns context.DeadlineExceeded once Done is closed, else nil.
func (c *callCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// Value returns parent's value for key.
func (c *callCtx) Value(key any) any { return c.parent.Value(key) }

// String names the context, as the standard library's do.
func (c *callCtx) String() string { return "idemkey call context" }
