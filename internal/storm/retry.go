package storm

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The retry policy of --retry: whether to ask again with the same key, and
// when. It is these two functions and nothing else, so that a shared client
// policy can replace them in one place.

const (
	// maxRetryAfter caps a single wait, whatever Retry-After says.
	maxRetryAfter = 30 * time.Second
	// firstBackoff and maxBackoff bound the wait after an answer without a
	// usable Retry-After (a transport error, most often): firstBackoff,
	// doubling with every retry, at most maxBackoff.
	firstBackoff = 100 * time.Millisecond
	maxBackoff   = 2 * time.Second
)

// retryable reports whether an answer is worth asking again with the same
// key: a transport error, or 408, 409, 425, 429 or 503 without
// Idempotent-Replayed (answers that are not final, see notFinal).
func retryable(status int, replayed bool, err error) bool {
	return err != nil || (!replayed && notFinal(status))
}

// retryDelay returns how long to wait before retry number n (0 for the
// first) after an answer whose Retry-After header is header: its delta
// seconds (fractions allowed) or HTTP date, at most maxRetryAfter; without
// a usable header, firstBackoff doubled n times, at most maxBackoff.
func retryDelay(header string, n int, now time.Time) time.Duration {
	v := strings.TrimSpace(header)
	if secs, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(secs) && secs >= 0 {
		if secs >= maxRetryAfter.Seconds() {
			return maxRetryAfter
		}
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, min(t.Sub(now), maxRetryAfter))
	}
	return min(firstBackoff<<min(n, 16), maxBackoff)
}
