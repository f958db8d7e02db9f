package observe

import (
	"context"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// MaxLabelLen is the longest value Label returns, in bytes.
const MaxLabelLen = 256

// Label returns s fit to be a metric label or attribute value: valid UTF-8
// (each run of bytes that are not is replaced by U+FFFD) and at most
// MaxLabelLen bytes (cut at a character boundary). It returns s itself,
// without allocating, when s is fit already.
func Label(s string) string {
	if len(s) <= MaxLabelLen && utf8.ValidString(s) {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > MaxLabelLen {
		cut := MaxLabelLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// Safe returns an Observer that passes every event and call on to o, and
// keeps o from breaking what it observes: a panic in o's methods is
// recovered and logged (with slog.Default, at most once a minute), and each
// event's Route is made fit for a label first (Label). redisstore.New wraps
// Options.Observer with it, so the store, Store.Do and the middleware never
// see an observer's panic: a request gets its answer and a run ends its
// lease whatever the observer does. Safe cannot bound the time o takes: a
// method that blocks delays the request it observes (the lease's heartbeat
// runs meanwhile). Safe returns nil for nil, and o itself when o is
// already one of Safe's.
func Safe(o Observer) Observer {
	switch o.(type) {
	case nil, *safe:
		return o
	}
	return &safe{o: o}
}

type safe struct {
	o       Observer
	panics  atomic.Int64
	lastLog atomic.Int64 // when a panic was last logged: nanoseconds since started (0: never)
}

// Event passes e on to the observer, with a route fit for a label.
func (s *safe) Event(ctx context.Context, e *Event) {
	e.Route = Label(e.Route)
	defer s.contain("Event", e.Kind.String())
	s.o.Event(ctx, e)
}

// Redis passes c on to the observer.
func (s *safe) Redis(ctx context.Context, c *Call) {
	defer s.contain("Redis", c.Script)
	s.o.Redis(ctx, c)
}

// contain recovers a panic of the observer's method, and logs it unless
// another was logged within the minute.
func (s *safe) contain(method, what string) {
	p := recover()
	if p == nil {
		return
	}
	n := s.panics.Add(1)
	// Measured from started on the monotonic clock: a step of the system
	// clock back silences nothing.
	now, last := int64(time.Since(started)), s.lastLog.Load()
	if last != 0 && now-last < int64(time.Minute) || !s.lastLog.CompareAndSwap(last, now) {
		return
	}
	slog.Default().Error("idemkey: the observer panicked; the request goes on, unobserved by it",
		"method", method, "of", what, "panic", p, "panics", n, "stack", string(debug.Stack()))
}

// started is what safe measures the time between panics logged from.
var started = time.Now()
