package idemclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ErrInvalidKey is returned (inside an *Error) when the request's key
// cannot be sent: a key pinned with WithKey that breaks its rules, more than
// one Idempotency-Key header, or a pinned key that differs from the one in
// the header. Nothing is sent.
var ErrInvalidKey = errors.New("idemclient: invalid idempotency key")

// Stop says why the Transport stopped trying: what Result.Stop holds.
type Stop string

const (
	// StopFinal means the response is a final answer — a success, a redirect,
	// a replay (Idempotent-Replayed: true, whatever its status), or a
	// status that retrying cannot change (400, 422, other 4xx, 501, …).
	StopFinal Stop = "final"
	// StopPermanent means the attempt failed in a way a retry cannot fix: TLS
	// certificate verification, an unsupported scheme, an unknown host, an
	// invalid key, a request body that could not be read.
	StopPermanent Stop = "permanent"
	// StopUnsafe means the request has no key and a method that is not
	// idempotent by HTTP's definition, so it is never retried.
	StopUnsafe Stop = "unsafe"
	// StopBodyTooLarge means the request body had no GetBody and was larger
	// than Options.MaxBodyBytes, so it cannot be sent again.
	StopBodyTooLarge Stop = "body-too-large"
	// StopAttempts means Options.MaxAttempts attempts were made.
	StopAttempts Stop = "max-attempts"
	// StopBudget means the host's retry Budget had no token left, or the
	// Transport's RetryPolicy (budget, token-bucket) had no retry left for
	// the host.
	StopBudget Stop = "budget"
	// StopThrottled means the Transport's RetryPolicy (adaptive) rejected
	// an attempt locally: a first attempt (nothing was sent; the *Error's
	// cause is ErrThrottled) or a retry (the answer in hand is returned).
	StopThrottled Stop = "throttled"
	// StopDeadline means the wait before the next attempt would have ended at
	// or past the request context's deadline.
	StopDeadline Stop = "deadline"
	// StopCanceled means the request context was cancelled or its deadline
	// passed during an attempt or a wait.
	StopCanceled Stop = "canceled"
)

// Attempt is one HTTP attempt of a request.
type Attempt struct {
	// Status is the response status, or 0 if no response arrived.
	Status int
	// Err is why the attempt failed without a usable response: a network
	// error, or a response body cut short (Status then says what it was).
	Err error
	// Replayed reports Idempotent-Replayed: true on the response.
	Replayed bool
	// Wait is how long the Transport waited after this attempt before the
	// next one; 0 for the last attempt.
	Wait time.Duration
}

// Result says what happened to one request sent through the Transport.
type Result struct {
	// Key is the idempotency key sent with every attempt: minted, pinned
	// with WithKey, or the caller's own (then exactly as the caller wrote
	// the header value). "" if the request carried none.
	Key string
	// KeyMinted reports that the Transport minted Key (a UUIDv7).
	KeyMinted bool
	// Attempts is the number of HTTP attempts made (len(History)); 0 if
	// the request was refused before sending.
	Attempts int
	// History lists the attempts in order.
	History []Attempt
	// Replayed reports that the final response carried
	// Idempotent-Replayed: true: the server answered with the stored
	// outcome of an earlier attempt, not a new execution.
	Replayed bool
	// RetryAfter is the last valid Retry-After any response carried, as
	// the server asked (before clamping); meaningful only if HasRetryAfter.
	RetryAfter time.Duration
	// HasRetryAfter reports that some response carried a valid Retry-After.
	HasRetryAfter bool
	// Waited is the total time spent waiting between attempts.
	Waited time.Duration
	// Stop says why the Transport stopped.
	Stop Stop
}

// Retries returns the number of retries made: Attempts-1, or 0.
func (r Result) Retries() int { return max(0, r.Attempts-1) }

// Error is the error RoundTrip returns when the request ends without a
// response: its Result, and the cause (the last attempt's error, the
// context's error, or ErrInvalidKey). errors.Is and errors.As see the
// cause through it.
type Error struct {
	// Result is what happened: the key, the attempts, why it stopped.
	Result Result
	// Err is the cause.
	Err error
}

// Error describes the failure with its attempts, key and stop reason.
func (e *Error) Error() string {
	r := e.Result
	if r.Attempts == 0 {
		return fmt.Sprintf("idemclient: nothing sent: %v", e.Err)
	}
	return fmt.Sprintf("idemclient: %d attempt(s) with key %q, stopped (%s): %v", r.Attempts, r.Key, r.Stop, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

type resultCtx struct{}

// ResultOf returns the Result of the request that gave resp or err, as
// returned by Transport.RoundTrip or by an http.Client that uses the
// Transport (through the client's *url.Error). It reports false when
// neither came from a Transport. When resp is not nil, the Result is read
// from resp.Request, which the Transport sets; a redirect followed by
// http.Client gives the Result of the last hop.
func ResultOf(resp *http.Response, err error) (Result, bool) {
	if resp != nil && resp.Request != nil {
		if r, ok := resp.Request.Context().Value(resultCtx{}).(*Result); ok {
			return *r, true
		}
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Result, true
	}
	return Result{}, false
}

// withResult returns req with r in its context, for ResultOf.
func withResult(req *http.Request, r *Result) *http.Request {
	return req.WithContext(context.WithValue(req.Context(), resultCtx{}, r))
}
