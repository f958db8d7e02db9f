package storm

import (
	"net/http"
	"time"

	"github.com/idemkey/idemkey/idemclient"
)

// The retry policy of --retry: whether to ask again with the same key, and
// when. The waiting is idemclient's (one implementation for the client
// transport and storm); which answers are worth a retry is storm's own,
// since a storm counts executions where a client only wants its answer.

// policy waits out Retry-After (delta seconds, fractions allowed, or an HTTP
// date) up to 30s; without a usable one, a random wait below 100ms doubled
// with every retry, at most 2s (full jitter, so that retried duplicates do
// not arrive in step).
var policy = idemclient.Policy{BaseDelay: 100 * time.Millisecond, MaxDelay: 2 * time.Second, MaxRetryAfter: 30 * time.Second}

// retryable reports whether an answer is worth asking again with the same
// key: a transport error, or 408, 409, 425, 429 or 503 without
// Idempotent-Replayed (answers that are not final, see notFinal), or 500,
// 502 or 504 without it (idemkey released the key: the retry runs it), as
// idemclient and load mode retry them.
func retryable(status int, replayed bool, err error) bool {
	if err != nil {
		return true
	}
	if replayed {
		return false
	}
	switch status {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout:
		return true
	}
	return notFinal(status)
}

// retryDelay returns how long to wait before retry number n (0 for the
// first) after an answer whose Retry-After header is header.
func retryDelay(header string, n int, now time.Time) time.Duration {
	return policy.Delay(n+1, header, now)
}
