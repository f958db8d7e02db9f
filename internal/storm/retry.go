package storm

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// retryAfter interprets a Retry-After header value: delta seconds (possibly
// fractional) or an HTTP date. It returns defaultRetryAfter for an empty or
// malformed value and never more than maxRetryAfter.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return defaultRetryAfter
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if math.IsNaN(secs) || secs < 0 {
			return defaultRetryAfter
		}
		if secs >= maxRetryAfter.Seconds() {
			return maxRetryAfter
		}
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		d := t.Sub(now)
		return max(0, min(d, maxRetryAfter))
	}
	return defaultRetryAfter
}
