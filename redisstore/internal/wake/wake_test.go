package wake

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

// TestWatch: a message on a watched channel closes the channel Watch gave
// every waiter of it; a later Watch gets a fresh one; the subscription is
// one per channel, and goes when its last waiter stops.
func TestWatch(t *testing.T) {
	mr := miniredis.RunT(t)
	clients := map[string]*redis.Client{
		"redis":     redistest.Start(t).Client(t),
		"miniredis": redis.NewClient(&redis.Options{Addr: mr.Addr()}),
	}
	for name, client := range clients {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			w := New(client)
			woken1, stop1 := w.Watch(ctx, "ch")
			woken2, stop2 := w.Watch(ctx, "ch")
			require.NotNil(t, woken1)
			require.NotNil(t, woken2)
			other, stopOther := w.Watch(ctx, "other")
			require.NotNil(t, other)
			require.Eventually(t, func() bool {
				n, err := client.PubSubNumSub(ctx, "ch").Result()
				return err == nil && n["ch"] == 1
			}, 5*time.Second, 5*time.Millisecond, "one subscription for two waiters")

			require.NoError(t, client.Publish(ctx, "ch", "").Err())
			for _, woken := range []<-chan struct{}{woken1, woken2} {
				select {
				case <-woken:
				case <-time.After(5 * time.Second):
					t.Fatal("the message did not wake a waiter")
				}
			}
			select {
			case <-other:
				t.Fatal("a message on another channel woke a waiter")
			default:
			}
			again, stop3 := w.Watch(ctx, "ch")
			select {
			case <-again:
				t.Fatal("a new watch is woken by an old message")
			default:
			}
			stop1()
			stop2()
			stop3()
			stopOther()
			require.Eventually(t, func() bool {
				n, err := client.PubSubNumSub(ctx, "ch", "other").Result()
				return err == nil && n["ch"] == 0 && n["other"] == 0
			}, 5*time.Second, 5*time.Millisecond, "unsubscribed once nobody waits")
		})
	}
}

// gatedDialer dials Redis, or, while shut, holds every dial until it opens
// again or the dial's context ends, as a blackholed network does.
type gatedDialer struct {
	mu      sync.Mutex
	shut    chan struct{} // nil while open
	waiting chan struct{} // gets a value when a dial starts waiting
}

func (d *gatedDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	shut := d.shut
	d.mu.Unlock()
	if shut != nil {
		select {
		case d.waiting <- struct{}{}:
		default:
		}
		select {
		case <-shut:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

func (d *gatedDialer) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shut == nil {
		d.shut = make(chan struct{})
	}
}

func (d *gatedDialer) open() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shut != nil {
		close(d.shut)
		d.shut = nil
	}
}

// TestWakerStopDoesNotHoldTheWaiters: a waiter that stops waiting while the
// pub/sub connection is reconnecting to an unreachable Redis (a dial that
// hangs) must not hold up the other waiters. stop used to unsubscribe under
// the waker's lock: it blocked there behind the reconnect, and with it
// every other waiter's watch, whatever its deadline, and every wake-up.
func TestWakerStopDoesNotHoldTheWaiters(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	d := &gatedDialer{waiting: make(chan struct{}, 1)}
	t.Cleanup(d.open)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), Dialer: d.dial, DialTimeout: 20 * time.Second})
	t.Cleanup(func() { _ = client.Close() })
	w := New(client)
	ctx := context.Background()
	subscribers := func(channel string) int64 {
		n, err := admin.PubSubNumSub(ctx, channel).Result()
		require.NoError(t, err)
		return n[channel]
	}

	_, stopA := w.Watch(ctx, "chA")
	_, stopB := w.Watch(ctx, "chB")
	require.NotNil(t, stopA)
	require.NotNil(t, stopB)
	require.Eventually(t, func() bool { return subscribers("chA") == 1 && subscribers("chB") == 1 }, 5*time.Second, 5*time.Millisecond)

	// The pub/sub connection drops, and its reconnect hangs.
	d.close()
	require.NoError(t, admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
	select {
	case <-d.waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the pub/sub connection did not reconnect")
	}

	stopped := make(chan struct{})
	go func() {
		stopB()
		close(stopped)
	}()
	// The reconnect hangs until the test opens the dialer: a stop or a
	// watch that waited for it would wait for ever. The bounds are
	// liveness guards, 4x and more what a loaded race build takes.
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		d.open()
		t.Fatal("stop blocked behind the reconnect")
	}
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, stopA2 := w.Watch(wctx, "chA") // another waiter on a subscribed channel
	require.Less(t, time.Since(start), 4*(500*time.Millisecond+time.Second), "watch blocked past its deadline")

	// Once Redis can be reached again, A's waiters are subscribed and B is not.
	d.open()
	require.Eventually(t, func() bool { return subscribers("chA") == 1 && subscribers("chB") == 0 }, 10*time.Second, 5*time.Millisecond)
	stopA()
	stopA2()
	require.Eventually(t, func() bool { return subscribers("chA") == 0 }, 5*time.Second, 5*time.Millisecond)
}
