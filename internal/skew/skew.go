// Package skew makes, for tests, the times a process sees when the system
// clock is stepped (by NTP, an operator, a VM resumed from a pause): a
// time.Time whose wall reading has moved while its monotonic reading has
// not. Code that measures durations between such times with the wall
// clock (UnixNano, Round(0)) goes wrong by the step; code that uses the
// monotonic reading (Sub, Since, Until, Before) does not. The standard
// library has no way to build such a time, so Wall writes the wall field
// of the value directly.
package skew

import (
	"time"
	"unsafe"
)

// hasMonotonic is the flag bit of time.Time's wall field that says it
// holds a monotonic reading; the wall seconds (since 1885) sit above the
// low 30 bits of nanoseconds. See the comment on time.Time in the standard
// library's time.go.
const (
	hasMonotonic = 1 << 63
	nsecBits     = 30
)

// Wall returns t with its wall reading moved by d (rounded down to whole
// seconds) and its monotonic reading kept, as time.Now would have returned
// it had the clock been stepped by d just before. t must hold a monotonic
// reading (come from time.Now, possibly through Add); Wall panics if not.
func Wall(t time.Time, d time.Duration) time.Time {
	p := (*struct {
		wall uint64
		ext  int64
	})(unsafe.Pointer(&t))
	if p.wall&hasMonotonic == 0 {
		panic("skew: Wall of a time with no monotonic reading")
	}
	p.wall += uint64(int64(d/time.Second)) << nsecBits // two's complement: a negative d moves it back
	return t
}
