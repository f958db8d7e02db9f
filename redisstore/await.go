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
// A wait on an operation this process runs needs no Redis call at all. A
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
	for {
		c, err := s.Claim(ctx, req)
		var ip *InProgressError
		if !errors.As(err, &ip) {
			return c, err
		}
		if !s.wait(ctx, s.newLease(req), &backoff) {
			return nil, err
		}
	}
}

// wait waits for l's key to change hands: its local run to end, or a
// wake-up, or the next poll. It returns false when ctx ends first.
func (s *Store) wait(ctx context.Context, l *Lease, backoff *time.Duration) bool {
	if f := s.flights.get(l.keys.Record()); f != nil && f.fp == l.fp && s.flights.owned(f) {
		select {
		case <-s.flights.doneChan(f):
			return true
		case <-ctx.Done():
			return false
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
type waker struct {
	client subscriber

	mu    sync.Mutex
	ps    *redis.PubSub
	subs  map[string]*waiters
	idle  *time.Timer // closes ps when it has had no waiter for linger
	alive chan struct{}
}

// waiters are the waiters of one channel.
type waiters struct {
	n     int
	ready chan struct{} // closed once Redis confirmed the subscription
	woken chan struct{} // closed (and replaced) when a message arrives
}

const linger = 10 * time.Second

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
		w.ps = w.client.Subscribe(context.WithoutCancel(ctx))
		w.subs = map[string]*waiters{}
		w.alive = make(chan struct{})
		go w.read(w.ps, w.alive)
	}
	ws := w.subs[channel]
	first := ws == nil
	if first {
		ws = &waiters{ready: make(chan struct{}), woken: make(chan struct{})}
		w.subs[channel] = ws
	}
	ws.n++
	woken, ready, ps := ws.woken, ws.ready, w.ps
	w.mu.Unlock()
	if first {
		// Outside the lock: subscribing is I/O, and a Redis that hangs must
		// not hold up the other waiters.
		if err := ps.Subscribe(ctx, channel); err != nil {
			w.mu.Lock()
			ws.n--
			if ws.n == 0 && w.subs[channel] == ws {
				delete(w.subs, channel)
			}
			w.mu.Unlock()
			return nil, nil
		}
	}

	stop := func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		ws.n--
		if ws.n == 0 && w.subs[channel] == ws {
			delete(w.subs, channel)
			if w.ps != nil {
				_ = w.ps.Unsubscribe(context.Background(), channel)
			}
		}
		if len(w.subs) == 0 && w.ps != nil {
			ps := w.ps
			w.idle = time.AfterFunc(linger, func() {
				w.mu.Lock()
				defer w.mu.Unlock()
				if len(w.subs) == 0 && w.ps == ps {
					_ = ps.Close()
					w.ps = nil
				}
			})
		}
	}
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ready:
	case <-t.C: // not confirmed yet: the poll covers a lost wake-up
	case <-ctx.Done():
	}
	return woken, stop
}

// read delivers ps's confirmations and messages to the waiters until ps is
// closed.
func (w *waker) read(ps *redis.PubSub, alive chan struct{}) {
	defer close(alive)
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
		if ws := w.subs[channel]; ws != nil {
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
