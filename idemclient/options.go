package idemclient

import (
	"context"
	"net/http"
	"time"
)

// Transport defaults, applied where an Options field is zero.
const (
	// defaultMaxAttempts is the default Options.MaxAttempts.
	defaultMaxAttempts = 5
	// defaultMaxBodyBytes is the default Options.MaxBodyBytes.
	defaultMaxBodyBytes = 1 << 20
	// defaultResponseBuffer is the default Options.ResponseBuffer.
	defaultResponseBuffer = 1 << 20
)

// Options configures a Transport; the zero value gives the defaults.
type Options struct {
	// Methods are the methods whose requests get a key when they have
	// none. Requests with a key are retried; so are requests of methods
	// that HTTP defines as idempotent (GET, HEAD, OPTIONS, TRACE, PUT,
	// DELETE). An empty, non-nil slice mints no keys. Default: POST and
	// PATCH.
	Methods []string

	// KeyFormat is how a minted or pinned key is written into the header;
	// a key the caller set is sent as it is. Default: FormatToken.
	KeyFormat KeyFormat

	// MaxAttempts bounds the attempts of one request, the first included;
	// 1 turns retries off. Default: 5.
	MaxAttempts int

	// AttemptTimeout bounds each attempt, reading the response included,
	// so that a hung attempt is retried (with the same key: a server that
	// is still running it answers 409, then the stored outcome) while the
	// request's own context is still alive. Default: 0, no bound but the
	// request context's.
	AttemptTimeout time.Duration

	// MaxBodyBytes is the largest request body, without GetBody, that the
	// Transport buffers so it can send it again. A larger one is sent once
	// and not retried (StopBodyTooLarge). Requests made by
	// http.NewRequest from a *bytes.Buffer, *bytes.Reader or
	// *strings.Reader have GetBody and are never buffered. Negative: never
	// buffer. Default: 1 MiB, the idemkey
	// middleware's limit.
	MaxBodyBytes int64

	// ResponseBuffer is how much of a response body RoundTrip reads before
	// returning it, so that a connection lost in the middle of a response
	// is retried like any other network error. A longer body is passed on
	// as it streams, and a failure past this point reaches the caller's
	// Read. Negative: never read ahead. Default: 1 MiB.
	ResponseBuffer int64

	// Policy computes the waits between attempts. Default: the zero
	// Policy (Retry-After within 30s, else backoff from 100ms to 10s with
	// full jitter).
	Policy Policy

	// Budget is the retry budget per host; share one between Transports to
	// pool it. Default: a Budget of this Transport's own, with the
	// BudgetOptions defaults.
	Budget *Budget

	// NoBudget turns the retry budget off: only MaxAttempts and the
	// request context bound retries. Default: false.
	NoBudget bool

	// RetryPolicy, if set, is the named retry policy the Transport retries
	// by (see NewRetryPolicy): its Delay replaces Policy's waits, and its
	// Allow replaces the Budget: it may refuse a retry (StopBudget,
	// StopThrottled) or, adaptive only, a first attempt (StopThrottled,
	// ErrThrottled). Which answers are worth a retry, and MaxAttempts,
	// stay as they are. Policy and Budget must then be left zero (set the
	// waits in RetryOptions.Policy); NoBudget is implied. Share one
	// RetryPolicy between Transports to share its budget.
	// Default: nil, the Policy and Budget above.
	RetryPolicy *RetryPolicy

	// OnResult, if set, is called once per request, before RoundTrip
	// returns, with the caller's request and what happened to it. It is
	// called concurrently when the Transport is used concurrently.
	// Default: nil.
	OnResult func(req *http.Request, r Result)

	// Now is the clock, for HTTP-date Retry-After values, the request
	// deadline, and the Budget or the RetryPolicy's windows.
	// Default: time.Now.
	Now func() time.Time

	// Sleep waits d or until ctx is done, and returns ctx.Err() in the
	// latter case. Tests replace it to run without waiting. Default: a
	// timer.
	Sleep func(ctx context.Context, d time.Duration) error
}
