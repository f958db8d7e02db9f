package timers

import (
	"context"
	"sync/atomic"
	"time"
)

// Held is a lease a Supervision keeps: Extend pushes it out (lost: its
// holder has lost it), Left is how long it holds at least by this
// process's clock, and Expire marks it past its maximum duration.
type Held interface {
	Extend(ctx context.Context) (lost bool, err error)
	Left() time.Duration
	Expire()
}

// Supervision is one operation's watch over its lease, on a Watch in a
// queue: beats extend the lease with contexts of their own (cancelling the
// operation does not stop them; only Stop does). The lease is lost when
// its holder says so, or when a beat fails after the lease ran out; then
// the operation is cancelled with LostCause and OnLost is called. Past the
// maximum duration the lease is expired (Held.Expire), no beat follows,
// and the operation is cancelled with OverCause. Set the fields, then
// Supervise; the zero value is ready for them.
type Supervision struct {
	Watch
	Held                 Held
	Cancel               context.CancelCauseFunc // nil: nothing to cancel
	OnLost               func()                  // nil: none
	LostCause, OverCause error
}

// Supervise starts s on q: its first beat every from now, and its end
// maxDur from now if positive.
func (s *Supervision) Supervise(q *Queue[*Watch], every, maxDur time.Duration) {
	var over time.Time
	if maxDur > 0 {
		over = time.Now().Add(maxDur)
	}
	s.Start(q, s, every, over)
}

// Beat extends the lease.
func (s *Supervision) Beat(ctx context.Context) (lost, failed bool) {
	lost, err := s.Held.Extend(ctx)
	return lost || (err != nil && s.Held.Left() <= 0), err != nil
}

// Lost tells the owner its lease is lost.
func (s *Supervision) Lost() {
	if s.Cancel != nil {
		s.Cancel(s.LostCause)
	}
	if s.OnLost != nil {
		s.OnLost()
	}
}

// Over ends the operation at its maximum duration.
func (s *Supervision) Over() {
	s.Held.Expire()
	if s.Cancel != nil {
		s.Cancel(s.OverCause)
	}
}

// signEpoch is what signs of life are measured from, on the monotonic
// clock: a step of the system clock moves no lease's end.
var signEpoch = time.Now()

// Sign is when a lease's last acknowledged sign of life (a claim, extend
// or checkpoint Redis acknowledged) was sent. The zero value is the
// process's start. It is safe for concurrent use.
type Sign struct{ ns atomic.Int64 }

// Set records a sign of life sent at t.
func (s *Sign) Set(t time.Time) { s.ns.Store(int64(t.Sub(signEpoch))) }

// Time returns when the last sign of life was sent.
func (s *Sign) Time() time.Time { return signEpoch.Add(time.Duration(s.ns.Load())) }

// Left returns how long a lease of length lease holds at least, by the
// last sign of life.
func (s *Sign) Left(lease time.Duration) time.Duration { return lease - time.Since(s.Time()) }
