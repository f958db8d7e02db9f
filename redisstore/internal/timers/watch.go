package timers

import (
	"context"
	"sync"
	"time"
)

// Watched is the owner a Watch keeps alive.
type Watched interface {
	// Beat is one heartbeat, within ctx. lost says the owner has lost what
	// it holds (the watch stops and Lost is told); failed says the beat did
	// not get through, so the next one comes sooner.
	Beat(ctx context.Context) (lost, failed bool)
	// Lost is told once, from a beat that said lost.
	Lost()
	// Over is told once, when the watch's end time passes; no beat
	// follows.
	Over()
}

// Watch is one owner's heartbeat on a Queue[*Watch]: a beat every
// interval, each given a third of it and, when one fails, the next after a
// fifth of it; and an optional end time (Over). Beats run on goroutines of
// their own, so nothing runs, and nothing is allocated, for an owner
// stopped before its first beat. Embed it in the owner; the zero value is
// ready. Stop may be called more than once.
type Watch struct {
	entry    Entry[*Watch]
	q        *Queue[*Watch]
	owner    Watched
	every    time.Duration
	over     time.Time // zero: no end
	mu       sync.Mutex
	stopped  bool
	inflight sync.WaitGroup
}

// Start queues w's first beat, one interval from now (or its end, if
// sooner). over is the end time; zero for none.
func (w *Watch) Start(q *Queue[*Watch], owner Watched, every time.Duration, over time.Time) {
	w.q, w.owner, w.every, w.over = q, owner, every, over
	w.add(time.Now().Add(every))
}

// add queues the next deadline: due, or the end if sooner.
func (w *Watch) add(due time.Time) {
	if !w.over.IsZero() && w.over.Before(due) {
		due = w.over
	}
	w.q.Add(&w.entry, w, due)
}

// Fire is the Queue's fire function: it starts the beat that is due.
func (w *Watch) Fire() { go w.beat() }

// beat tells the owner its end has come, or beats and queues the next.
func (w *Watch) beat() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.inflight.Add(1) // Stop waits for the beat, or for Over
	defer w.inflight.Done()
	if !w.over.IsZero() && !time.Now().Before(w.over) {
		w.stopped = true // no more beats: a stuck owner cannot hold on
		w.mu.Unlock()
		w.owner.Over()
		return
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), max(w.every/3, time.Millisecond))
	lost, failed := w.owner.Beat(ctx)
	cancel()
	if lost {
		w.owner.Lost()
		return
	}
	next := w.every
	if failed {
		next = max(w.every/5, time.Millisecond)
	}
	w.mu.Lock()
	if !w.stopped {
		w.add(time.Now().Add(next))
	}
	w.mu.Unlock()
}

// Stop ends the watch: no beat and no Over starts after it, and it waits
// for one in flight.
func (w *Watch) Stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	if w.q != nil {
		w.q.Remove(&w.entry)
	}
	w.inflight.Wait()
}
