package grpcmw

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/idemkey/idemkey/redisstore"
)

// During an outage every call fails the same way: one line per call buries
// the store's own one-line error and its recovery line. A logLimit lets the
// line of each cause through once per logEvery, with the count of those it
// held back since (as the HTTP middleware does).

// logEvery is how often a line of one cause is logged at most.
const logEvery = time.Minute

// logEpoch is what logLimit's times are measured from, on the monotonic
// clock.
var logEpoch = time.Now()

// logLimit limits log lines by cause. The zero value is ready; it is safe
// for concurrent use.
type logLimit struct {
	now  func() time.Duration // nil: the monotonic clock (tests set it)
	mu   sync.Mutex
	last map[string]time.Duration // when each cause was last logged
	held map[string]int           // lines of each cause held back since
}

// log logs msg with args at level, and the cause, unless a line of the
// same msg and cause went out within logEvery; then it only counts it.
func (l *logLimit) log(logger *slog.Logger, level slog.Level, msg, cause string, args ...any) {
	now := time.Since(logEpoch)
	if l.now != nil {
		now = l.now()
	}
	k := msg + "\x00" + cause
	l.mu.Lock()
	if l.last == nil {
		l.last, l.held = map[string]time.Duration{}, map[string]int{}
	}
	if last, ok := l.last[k]; ok && now-last < logEvery {
		l.held[k]++
		l.mu.Unlock()
		return
	}
	l.last[k] = now
	held := l.held[k]
	l.held[k] = 0
	l.mu.Unlock()
	args = append(args, "cause", cause)
	if held > 0 {
		args = append(args, "more_since_last_logged", held)
	}
	logger.Log(context.Background(), level, msg, args...)
}

// storeCause names why the store could not be used, for logLimit.
func storeCause(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, redisstore.ErrEvicting):
		return "evicting"
	case errors.Is(err, redisstore.ErrNoPersistence):
		return "no persistence"
	}
	return "other"
}
