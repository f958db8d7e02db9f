package redisstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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
	if f := s.flights.get(l.keys.Record()); f != nil && f.fp == l.fp {
		if left := s.flights.owned(f); left > 0 {
			// Past what the run's lease has left by this process's clock,
			// only Redis knows: the run may be stuck without a heartbeat,
			// and another process may have taken the key over.
			return sleep(ctx, s.flights.doneChan(f), left)
		}
	}
	poll := *backoff
	*backoff = min(2**backoff, 100*time.Millisecond)
	if s.wake != nil {
		if woken, stop := s.wake.watch(ctx, l.keys.Channel()); woken != nil {
			defer stop()
			reply, err := s.call(ctx, nil, watchScript, l.keys.One, string(l.fp[:]))
			if err == nil && reply == int64(0) {
				return true // completed or free meanwhile: claim again now
			}
			return sleep(ctx, woken, 250*time.Millisecond)
		}
	}
	return sleep(ctx, nil, poll)
}

// sleep waits for woken (if not nil) or d, and returns false if ctx ends first.
func sleep(ctx context.Context, woken <-chan struct{}, d time.Duration) bool {
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

// subscriber is a client that can subscribe to pub/sub channels.
type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// waker keeps one pub/sub connection for the store's waiters, subscribed to
// the wake-up channels somebody waits on, and closes it once nobody has
// waited for a while.
//
// Subscribing and unsubscribing is I/O that can hang (a pub/sub connection
// reconnects under its own lock, dialling a Redis that may not answer), so
// it never happens under mu: watch and stop decide under mu and queue the
// change, and one writer per connection makes the changes in that order.
type waker struct {
	client subscriber

	mu   sync.Mutex
	ps   *redis.PubSub
	subs map[string]*waiters
	ops  []subOp       // changes for ps's writer, in the order decided
	kick chan struct{} // tells ps's writer there are ops, or ps is done
	idle *time.Timer   // retires ps when it has had no waiter for linger
}

// waiters are the waiters of one channel.
type waiters struct {
	n      int
	ready  chan struct{} // closed once Redis confirmed the subscription
	failed chan struct{} // closed if the subscription could not be sent
	woken  chan struct{} // closed (and replaced) when a message arrives
}

// subOp is a subscription change: subscribe ws's channel, or unsubscribe
// channel when ws is nil.
type subOp struct {
	channel string
	ws      *waiters
}

const (
	linger = 10 * time.Second

	// opTimeout bounds one subscription change the writer sends.
	opTimeout = 5 * time.Second
)

// watch subscribes to channel for the caller and returns a channel that is
// closed when a message arrives on it, and stop, to call when done waiting.
// It waits (briefly) until Redis has confirmed the subscription, so that a
// message published after watch returns is not missed. It returns nil when
// no subscription can be made.
func (w *waker) watch(ctx context.Context, channel string) (<-chan struct{}, func()) {
	w.mu.Lock()
	if w.idle != nil {
		w.idle.Stop()
	}
	if w.ps == nil {
		w.ps = w.client.Subscribe(context.WithoutCancel(ctx)) // no channel: no I/O yet
		w.subs = map[string]*waiters{}
		w.ops = nil
		w.kick = make(chan struct{}, 1)
		go w.read(w.ps)
		go w.write(w.ps, w.kick)
	}
	ws := w.subs[channel]
	if ws == nil {
		ws = &waiters{ready: make(chan struct{}), failed: make(chan struct{}), woken: make(chan struct{})}
		w.subs[channel] = ws
		w.queue(subOp{channel: channel, ws: ws})
	}
	ws.n++
	woken, ready, failed := ws.woken, ws.ready, ws.failed
	w.mu.Unlock()

	stop := func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		ws.n--
		if ws.n == 0 && w.subs[channel] == ws {
			delete(w.subs, channel)
			w.queue(subOp{channel: channel})
		}
		if len(w.subs) == 0 && w.ps != nil {
			ps := w.ps
			w.idle = time.AfterFunc(linger, func() {
				w.mu.Lock()
				defer w.mu.Unlock()
				if len(w.subs) == 0 && w.ps == ps {
					w.ps, w.ops = nil, nil
					w.signal() // its writer closes it
				}
			})
		}
	}
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ready:
	case <-failed:
		stop()
		return nil, nil
	case <-t.C: // not confirmed yet: the poll covers a lost wake-up
	case <-ctx.Done():
	}
	return woken, stop
}

// queue queues op for the writer. Called with w.mu held.
func (w *waker) queue(op subOp) {
	w.ops = append(w.ops, op)
	w.signal()
}

// signal wakes the writer. Called with w.mu held.
func (w *waker) signal() {
	select {
	case w.kick <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// write makes the subscription changes queued for ps, in order, until ps
// is retired, then closes it.
func (w *waker) write(ps *redis.PubSub, kick <-chan struct{}) {
	for range kick {
		w.mu.Lock()
		retired := w.ps != ps
		ops := w.ops
		w.ops = nil
		w.mu.Unlock()
		if retired {
			_ = ps.Close()
			return
		}
		for len(ops) > 0 {
			// Consecutive changes of one kind go out as one command.
			n := 1
			for n < len(ops) && (ops[n].ws == nil) == (ops[0].ws == nil) {
				n++
			}
			channels := make([]string, n)
			for i, op := range ops[:n] {
				channels[i] = op.channel
			}
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			if ops[0].ws == nil {
				_ = ps.Unsubscribe(ctx, channels...)
			} else if err := ps.Subscribe(ctx, channels...); err != nil {
				w.fail(ops[:n])
			}
			cancel()
			ops = ops[n:]
		}
	}
}

// fail tells the waiters of subscriptions that could not be sent, so that
// they poll, and forgets them, so that the next waiter subscribes again.
func (w *waker) fail(ops []subOp) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, op := range ops {
		close(op.ws.failed)
		if w.subs[op.channel] == op.ws {
			delete(w.subs, op.channel)
		}
	}
}

// read delivers ps's confirmations and messages to the waiters until ps is
// closed.
func (w *waker) read(ps *redis.PubSub) {
	for m := range ps.ChannelWithSubscriptions() {
		var channel string
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			channel = m.Channel
		case *redis.Message:
			channel = m.Channel
		default:
			continue
		}
		w.mu.Lock()
		if ws := w.subs[channel]; ws != nil && w.ps == ps {
			if _, isMsg := m.(*redis.Message); isMsg {
				close(ws.woken)
				ws.woken = make(chan struct{})
			} else {
				select {
				case <-ws.ready:
				default:
					close(ws.ready)
				}
			}
		}
		w.mu.Unlock()
	}
}
