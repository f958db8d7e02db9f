// Package timers runs the deadlines of many owners on one timer: a Queue
// holds each owner's next deadline in a heap, and one time.Timer, armed for
// the earliest, hands every deadline that has passed to the queue's fire
// function.
//
// It is what lets a store supervise every running lease (heartbeat,
// MaxDuration) with no timer and no allocation per lease: an owner embeds
// its Entry, and adding or removing it costs a lock and O(log n) moves.
// Most owners are removed long before their deadline, and cost nothing
// more; the timer wakes about once per deadline distance while there are
// owners, whatever their number.
package timers

import (
	"sync"
	"time"
)

// Entry is one owner's place in a Queue, embedded in the owner. The zero
// value is ready. An Entry is in at most one queue at a time.
type Entry[T any] struct {
	v     T
	due   time.Duration // since the queue's base, on the monotonic clock
	index int           // in the heap, plus one; 0 when not queued
}

// Queue calls fire with the owner of each Entry whose deadline has passed,
// once per Add, from the timer's goroutine, in order of deadline. fire must
// return soon (start a goroutine for slow work): the next deadlines wait
// for it. The zero value is not ready: use New. A Queue is safe for
// concurrent use.
//
// Deadlines are kept as distances from the time New was called, on the
// monotonic clock: a step of the system clock moves none of them (a
// heartbeat an hour late would lose its lease; one due at once, again and
// again, would loop). A due time with no monotonic reading (Round(0), a
// time parsed or built with time.Date) is measured on the wall clock.
type Queue[T any] struct {
	fire  func(T)
	base  time.Time // deadlines are durations since base
	mu    sync.Mutex
	heap  []*Entry[T]
	timer *time.Timer   // nil until the first Add
	armed time.Duration // the deadline the timer is armed for; 0: not armed
}

// New returns a Queue that hands each owner whose deadline passes to fire.
func New[T any](fire func(T)) *Queue[T] {
	return &Queue[T]{fire: fire, base: time.Now()}
}

// Add queues e, for owner v, with deadline due. e must not be queued.
func (q *Queue[T]) Add(e *Entry[T], v T, due time.Time) {
	d := max(due.Sub(q.base), 1) // 1: armed is never 0
	q.mu.Lock()
	defer q.mu.Unlock()
	if e.index != 0 {
		panic("timers: Add of an entry already queued")
	}
	e.v, e.due = v, d
	q.heap = append(q.heap, e)
	e.index = len(q.heap)
	q.up(len(q.heap) - 1)
	if q.armed == 0 || d < q.armed {
		q.arm(d)
	}
}

// Remove takes e out of the queue. It reports whether e was queued: false
// once its deadline has been handed to fire, or if it was never added.
// The timer stays armed: a wake-up for nothing re-arms it for the next.
func (q *Queue[T]) Remove(e *Entry[T]) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e.index == 0 {
		return false
	}
	i := e.index - 1
	last := len(q.heap) - 1
	if i != last {
		q.swap(i, last)
	}
	q.heap[last] = nil
	q.heap = q.heap[:last]
	e.index = 0
	var zero T
	e.v = zero
	if i != last {
		q.down(i)
		q.up(i)
	}
	return true
}

// Len returns how many entries are queued.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.heap)
}

// arm sets the timer for d; q.mu is held.
func (q *Queue[T]) arm(d time.Duration) {
	q.armed = d
	wait := d - time.Since(q.base)
	if q.timer == nil {
		q.timer = time.AfterFunc(wait, q.expire)
		return
	}
	q.timer.Reset(wait)
}

// expire hands every entry whose deadline has passed to fire, then arms
// the timer for the next one.
func (q *Queue[T]) expire() {
	for {
		q.mu.Lock()
		now := time.Since(q.base)
		if len(q.heap) == 0 {
			q.armed = 0
			q.mu.Unlock()
			return
		}
		e := q.heap[0]
		if e.due > now {
			q.arm(e.due)
			q.mu.Unlock()
			return
		}
		v := e.v
		last := len(q.heap) - 1
		q.swap(0, last)
		q.heap[last] = nil
		q.heap = q.heap[:last]
		e.index = 0
		var zero T
		e.v = zero
		q.down(0)
		q.mu.Unlock()
		q.fire(v) // unlocked: fire may Add again
	}
}

func (q *Queue[T]) swap(i, j int) {
	q.heap[i], q.heap[j] = q.heap[j], q.heap[i]
	q.heap[i].index, q.heap[j].index = i+1, j+1
}

func (q *Queue[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if q.heap[p].due <= q.heap[i].due {
			return
		}
		q.swap(i, p)
		i = p
	}
}

func (q *Queue[T]) down(i int) {
	n := len(q.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && q.heap[r].due < q.heap[l].due {
			m = r
		}
		if q.heap[i].due <= q.heap[m].due {
			return
		}
		q.swap(i, m)
		i = m
	}
}
