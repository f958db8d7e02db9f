// Package wake keeps the pub/sub connection of a store's waiters: one
// connection, subscribed to the channels somebody waits on, closed once
// nobody has waited for a while. Watch returns a channel that a message on
// the Redis channel closes, and Wait waits for it (or polls without it);
// what a wake-up means is the caller's.
//
// It knows nothing of package redisstore.
package wake

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Subscriber is a client that can subscribe to pub/sub channels.
type Subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Waker keeps one pub/sub connection for its waiters. It is safe for
// concurrent use.
//
// Subscribing and unsubscribing is I/O that can hang (a pub/sub connection
// reconnects under its own lock, dialling a Redis that may not answer), so
// it never happens under mu: Watch and its stop decide under mu and queue
// the change, and one writer per connection makes the changes in that
// order.
type Waker struct {
	client Subscriber

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
	// linger is how long a connection nobody waits on stays open.
	linger = 10 * time.Second

	// opTimeout bounds one subscription change the writer sends.
	opTimeout = 5 * time.Second

	// confirmTime bounds Watch's wait for Redis to confirm a subscription.
	confirmTime = 100 * time.Millisecond
)

// New returns a Waker on client. It does no I/O until the first Watch.
func New(client Subscriber) *Waker { return &Waker{client: client} }

// Watch subscribes to channel for the caller and returns a channel that is
// closed when a message arrives on it, and stop, to call when done waiting.
// It waits (at most 100ms, and not past ctx) until Redis has confirmed the
// subscription, so that a message published after Watch returns is not
// missed; past that, a wake-up may be missed, and the caller polls too. It
// returns nil (and no stop) when the subscription could not be sent.
func (w *Waker) Watch(ctx context.Context, channel string) (woken <-chan struct{}, stop func()) {
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

	stop = func() {
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
	t := time.NewTimer(confirmTime)
	defer t.Stop()
	select {
	case <-ready:
	case <-failed:
		stop()
		return nil, nil
	case <-t.C: // not confirmed yet: the caller's poll covers a lost wake-up
	case <-ctx.Done():
	}
	return woken, stop
}

// queue queues op for the writer. Called with w.mu held.
func (w *Waker) queue(op subOp) {
	w.ops = append(w.ops, op)
	w.signal()
}

// signal wakes the writer. Called with w.mu held.
func (w *Waker) signal() {
	select {
	case w.kick <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// write makes the subscription changes queued for ps, in order, until ps
// is retired, then closes it.
func (w *Waker) write(ps *redis.PubSub, kick <-chan struct{}) {
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
func (w *Waker) fail(ops []subOp) {
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
func (w *Waker) read(ps *redis.PubSub) {
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
