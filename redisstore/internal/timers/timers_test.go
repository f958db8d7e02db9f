package timers

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkey/idemkey/internal/skew"
	"github.com/stretchr/testify/require"
)

type owner struct {
	e  Entry[*owner]
	id int
}

// recv waits for the next owner fired, or fails after d.
func recv(t *testing.T, ch <-chan *owner, d time.Duration) *owner {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(d):
		t.Fatal("no deadline fired")
		return nil
	}
}

// TestQueueFiresInOrder: deadlines added out of order fire in order, each
// at its deadline, not before and not after (synctest's clock).
func TestQueueFiresInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fired := make(chan *owner, 16)
		q := New(func(o *owner) { fired <- o })
		now := time.Now()
		os := make([]*owner, 5)
		// Added out of order; deadlines 10ms apart.
		for _, i := range []int{3, 0, 4, 1, 2} {
			os[i] = &owner{id: i}
			q.Add(&os[i].e, os[i], now.Add(time.Duration(20+10*i)*time.Millisecond))
		}
		require.Equal(t, 5, q.Len())
		for i := range 5 {
			o := recv(t, fired, 10*time.Second)
			require.Equal(t, i, o.id, "deadlines in order")
			require.Equal(t, time.Duration(20+10*i)*time.Millisecond, time.Since(now), "fired at its deadline")
		}
		require.Zero(t, q.Len())
	})
}

func TestQueueRemove(t *testing.T) {
	fired := make(chan *owner, 16)
	q := New(func(o *owner) { fired <- o })
	early, late := &owner{id: 1}, &owner{id: 2}
	q.Add(&early.e, early, time.Now().Add(20*time.Millisecond))
	q.Add(&late.e, late, time.Now().Add(60*time.Millisecond))
	require.True(t, q.Remove(&early.e))
	require.False(t, q.Remove(&early.e), "removed already")
	// The timer, armed for early, wakes for nothing and re-arms for late.
	require.Equal(t, 2, recv(t, fired, 10*time.Second).id)
	require.False(t, q.Remove(&late.e), "fired already")
	select {
	case o := <-fired:
		t.Fatalf("owner %d fired after its removal", o.id)
	case <-time.After(100 * time.Millisecond): // ceiling: early's deadline passed long ago
	}
	// A removed entry can be added again.
	q.Add(&early.e, early, time.Now())
	require.Equal(t, 1, recv(t, fired, 10*time.Second).id)
}

// TestQueueReAddFromFire: fire may add the owner again (a heartbeat's next
// beat), and an earlier deadline added later re-arms the timer.
func TestQueueReAddFromFire(t *testing.T) {
	var q *Queue[*owner]
	fired := make(chan *owner, 16)
	var beats atomic.Int32
	q = New(func(o *owner) {
		if beats.Add(1) < 3 {
			q.Add(&o.e, o, time.Now().Add(5*time.Millisecond))
		}
		fired <- o
	})
	far := &owner{id: 9}
	q.Add(&far.e, far, time.Now().Add(time.Hour))
	o := &owner{id: 1}
	q.Add(&o.e, o, time.Now().Add(5*time.Millisecond))
	for range 3 {
		require.Equal(t, 1, recv(t, fired, 10*time.Second).id)
	}
	require.True(t, q.Remove(&far.e))
}

// TestQueueConcurrent: owners added and removed from many goroutines, a
// third of them left to fire: each fires once, none removed fires.
func TestQueueConcurrent(t *testing.T) {
	var (
		mu    sync.Mutex
		count = map[int]int{}
		wg    sync.WaitGroup
	)
	q := New(func(o *owner) {
		mu.Lock()
		count[o.id]++
		mu.Unlock()
		if o.id%3 == 0 {
			wg.Done()
		}
	})
	const n = 3000
	os := make([]*owner, n)
	var adders sync.WaitGroup
	for g := range 6 {
		adders.Add(1)
		go func() {
			defer adders.Done()
			for i := g; i < n; i += 6 {
				os[i] = &owner{id: i}
				keep := i%3 == 0
				if keep {
					wg.Add(1)
				}
				q.Add(&os[i].e, os[i], time.Now().Add(time.Duration(rand.IntN(20))*time.Millisecond))
				if !keep && !q.Remove(&os[i].e) {
					// It fired before we removed it: count it as kept.
					mu.Lock()
					count[i] -= 1000
					mu.Unlock()
				}
			}
		}()
	}
	adders.Wait()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("kept owners did not all fire")
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		switch c := count[i]; {
		case i%3 == 0:
			require.Equal(t, 1, c, "owner %d", i)
		case c < 0: // fired before its removal: once, and Remove said so
			require.Equal(t, 1-1000, c, "owner %d", i)
		default:
			require.Zero(t, c, "owner %d fired after its removal", i)
		}
	}
	require.Zero(t, q.Len())
}

// watched is a Watched that counts its beats and says what the test wants.
type watched struct {
	mu                sync.Mutex
	beats             int
	failUntil, lostAt int // beats that fail; the beat that says lost (0: none)
	lost, over        chan struct{}
}

func (o *watched) Beat(context.Context) (lost, failed bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.beats++
	return o.beats == o.lostAt, o.beats <= o.failUntil
}
func (o *watched) Lost() { close(o.lost) }
func (o *watched) Over() { close(o.over) }
func (o *watched) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.beats
}

func newWatched(failUntil, lostAt int) *watched {
	return &watched{failUntil: failUntil, lostAt: lostAt, lost: make(chan struct{}), over: make(chan struct{})}
}

func TestWatch(t *testing.T) {
	q := New((*Watch).Fire)
	t.Run("beats until lost, failed beats sooner", func(t *testing.T) {
		o, w := newWatched(2, 4), &Watch{}
		w.Start(q, o, 50*time.Millisecond, time.Time{})
		select {
		case <-o.lost:
		case <-time.After(10 * time.Second):
			t.Fatalf("not lost after %d beats", o.count())
		}
		w.Stop()
		if n := o.count(); n != 4 {
			t.Fatalf("%d beats, want 4: none after the lost one", n)
		}
	})
	t.Run("over ends it without a beat", func(t *testing.T) {
		o, w := newWatched(0, 0), &Watch{}
		w.Start(q, o, time.Hour, time.Now().Add(20*time.Millisecond))
		select {
		case <-o.over:
		case <-time.After(10 * time.Second):
			t.Fatal("not over")
		}
		w.Stop()
		if n := o.count(); n != 0 {
			t.Fatalf("%d beats, want 0", n)
		}
	})
	t.Run("stopped before its first beat, nothing runs", func(t *testing.T) {
		o, w := newWatched(0, 0), &Watch{}
		w.Start(q, o, 20*time.Millisecond, time.Time{})
		w.Stop()
		w.Stop()                          // twice is fine
		time.Sleep(60 * time.Millisecond) // three intervals: a beat would have come
		if n := o.count(); n != 0 {
			t.Fatalf("%d beats after Stop", n)
		}
	})
}

// TestQueueClockStep: deadlines are distances on the monotonic clock, so a
// step of the system clock (NTP, an operator, a VM resumed) moves none of
// them. skew.Wall makes the deadline of a clock stepped by an hour after
// it was taken: stepped back, a wall-clock queue would fire an hour late
// (the heartbeat would not come, the lease would be lost and another
// attempt would run the side effect again); stepped forward, at once.
func TestQueueClockStep(t *testing.T) {
	const after = 50 * time.Millisecond
	for _, step := range []time.Duration{time.Hour, -time.Hour} {
		fired := make(chan *owner, 1)
		q := New(func(o *owner) { fired <- o })
		start := time.Now()
		o := &owner{id: 1}
		q.Add(&o.e, o, skew.Wall(start.Add(after), step))
		recv(t, fired, 10*time.Second) // an hour late fails here
		if d := time.Since(start); d < after {
			t.Errorf("clock stepped by %v: fired after %v, before its deadline (%v)", step, d, after)
		}
	}
}

// TestWatchClockStep: a watch whose end time was taken before the clock
// stepped forward beats once per interval until its end, not in a loop.
func TestWatchClockStep(t *testing.T) {
	q := New((*Watch).Fire)
	o, w := newWatched(0, 0), &Watch{}
	w.Start(q, o, 40*time.Millisecond, skew.Wall(time.Now().Add(200*time.Millisecond), -time.Hour))
	select {
	case <-o.over:
	case <-time.After(10 * time.Second):
		t.Fatal("not over")
	}
	w.Stop()
	if n := o.count(); n > 5 {
		t.Fatalf("%d beats in 200ms at one per 40ms: the end time re-fired at once", n)
	}
}

// overBlocks is a Watched whose Over waits for the test.
type overBlocks struct {
	watched
	entered, release chan struct{}
}

func (o *overBlocks) Over() { close(o.entered); <-o.release }

// TestWatchStopWaitsForOver: Stop waits for an Over that has started, as
// for a beat: once Stop returns, nothing of the watch runs.
func TestWatchStopWaitsForOver(t *testing.T) {
	q := New((*Watch).Fire)
	o := &overBlocks{entered: make(chan struct{}), release: make(chan struct{})}
	w := &Watch{}
	w.Start(q, o, time.Hour, time.Now().Add(5*time.Millisecond))
	select {
	case <-o.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("not over")
	}
	stopped := make(chan struct{})
	go func() { w.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while Over was running")
	case <-time.After(50 * time.Millisecond): // Stop must not return until release
	}
	close(o.release)
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return after Over")
	}
}
