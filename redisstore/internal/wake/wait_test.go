package wake

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestSleep: woken, the timer, or ctx's end, whichever comes first.
func TestSleep(t *testing.T) {
	woken := make(chan struct{})
	close(woken)
	require.True(t, Sleep(context.Background(), woken, time.Hour), "woken")
	require.True(t, Sleep(context.Background(), nil, time.Millisecond), "the timer")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.False(t, Sleep(ctx, nil, time.Hour), "ctx ended")
}

// TestWaitWithoutPubSub: a nil Waker polls, and never asks changed.
func TestWaitWithoutPubSub(t *testing.T) {
	var w *Waker
	asked := 0
	require.True(t, w.Wait(context.Background(), "ch", time.Millisecond, func() bool { asked++; return true }))
	require.Zero(t, asked)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.False(t, w.Wait(ctx, "ch", time.Hour, func() bool { return true }))
}

// TestWaitSubscribed: subscribed, Wait asks changed first and returns at
// once when the key changed hands; else a message on the channel (or,
// were it lost, missed) ends it. Watch gives up on a subscription Redis
// has not confirmed within 100ms, and Wait then polls: on a loaded
// machine, try again (at most 50 times).
func TestWaitSubscribed(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	w := New(client)
	ctx := context.Background()

	for changed := range 2 {
		for i := 0; ; i++ {
			require.Less(t, i, 50, "never subscribed")
			asked := make(chan struct{})
			done := make(chan bool, 1)
			go func() {
				done <- w.Wait(ctx, "ch", 10*time.Millisecond, func() bool { close(asked); return changed == 1 })
			}()
			select {
			case ok := <-done: // polled: not subscribed in time
				require.True(t, ok)
				continue
			case <-asked:
			}
			if changed == 0 {
				require.NoError(t, client.Publish(ctx, "ch", "").Err())
			}
			select {
			case ok := <-done:
				require.True(t, ok)
			case <-time.After(5 * time.Second):
				t.Fatal("Wait did not return")
			}
			break
		}
	}
}
