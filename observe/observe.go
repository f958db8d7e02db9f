// Package observe lets an application see every decision idemkey makes and
// every Redis call it sends, without the core importing any metrics or
// tracing library. An Observer set in redisstore.Options.Observer receives
// them from the store, from Store.Do and from the HTTP middleware (ginmw,
// httpmw) on that store; the prometheus and otel modules of this repository
// turn them into metrics and spans, and Func adapts plain functions.
//
// A store without an Observer pays nothing: no event is built.
//
// Keys never appear in an Event: Event.KeyHash gives a keyed hash of the
// scope and key, so that operators can correlate a key's events across
// processes (with one secret for all) without the key itself in logs or
// labels.
package observe

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"time"
)

// Kind is the decision an Event reports.
type Kind uint8

// The decisions. Each request the middleware protects (or each Store.Do)
// ends in exactly one of Completed, Released, Fenced, NotStored, Replayed,
// InProgress, Mismatch, Expired, Unavailable, FailOpen or Rejected; a run
// is announced first by Claimed or TookOver. Forgotten is an operator's.
const (
	// Claimed: the key was free; the handler runs (Attempt 1).
	Claimed Kind = iota + 1
	// TookOver: an earlier attempt ended without an outcome; the handler
	// runs again as Attempt n.
	TookOver
	// Completed: the handler's outcome was stored (Status).
	Completed
	// Released: the handler ran but its answer is not an outcome (5xx,
	// 408, 409, 425, 429, a panic, an error left in Gin's c.Errors, a
	// transient error from Do's function): the key was given back.
	Released
	// Fenced: the lease was lost while the handler ran (another attempt
	// took the record over), so its outcome was not stored.
	Fenced
	// NotStored: the outcome could not be stored (Redis unreachable); a
	// retry after the lease resumes or runs again.
	NotStored
	// Replayed: the stored outcome was returned.
	Replayed
	// InProgress: another attempt holds the key (409).
	InProgress
	// Mismatch: the key was used for another request (422).
	Mismatch
	// Expired: the outcome expired; its tombstone answered.
	Expired
	// Unavailable: Redis could not be reached or answered with an error
	// (503, or 500 for an answer the store does not understand).
	Unavailable
	// FailOpen: Redis could not be reached and the handler ran unprotected.
	FailOpen
	// Rejected: the request was refused before any claim (Problem says why).
	Rejected
	// Forgotten: an operator removed the key's record (Store.Forget,
	// 'idemkey forget'); not a request's decision. Route, Attempt and Status
	// are the forgotten record's, as far as it kept them (a completed record
	// keeps no label); Problem is "forced" when a live lease was fenced
	// (Store.ForceForget).
	Forgotten
)

var kindNames = [...]string{"", "claimed", "took over", "completed", "released", "fenced", "not stored",
	"replayed", "in progress", "mismatch", "expired", "unavailable", "fail open", "rejected", "forgotten"}

// String returns the decision in words, such as "took over".
func (k Kind) String() string {
	if int(k) < len(kindNames) && k > 0 {
		return kindNames[k]
	}
	return "unknown"
}

// Event is one decision. Observers must not keep it or change it after
// their method returns.
type Event struct {
	// Kind is the decision.
	Kind Kind
	// Route names what was called: for the middleware, the method and the
	// route's pattern ("POST /v1/payments/{id}", Gin's FullPath), or the
	// method and "unmatched" ("POST unmatched") when no pattern is known,
	// never the path a client chose; for Store.Do, the Request's Label.
	// From a store it is fit for a label (see Label and Safe).
	Route string
	// Attempt is the attempt that ran or holds the key, when known: 1 for a
	// first run, n for the nth takeover. Zero when unknown.
	Attempt int
	// Status is the HTTP status (or Do's code) of Completed, Released,
	// Replayed and Expired.
	Status int
	// Problem is the problem type (its slug) the middleware answered, for
	// Rejected, Unavailable, InProgress, Mismatch and Expired; "forced" for
	// a Forgotten that fenced a live lease.
	Problem string
	// Held is how long the lease was held, for the decisions that end a
	// run (Completed, Released, Fenced, NotStored).
	Held time.Duration
	// Err is the error behind Fenced, NotStored, Unavailable and FailOpen.
	Err error

	scope, key string
}

// NewEvent returns an event for the key of scope and key, which only
// KeyHash reveals (as a hash). The store and the middleware build events
// with it; observers and tests may too.
func NewEvent(kind Kind, scope, key string) Event {
	return Event{Kind: kind, scope: scope, key: key}
}

// KeyHash returns a keyed hash of the event's scope and key: 22 characters
// of base64url, the same for every event of the key under the same secret,
// and revealing nothing of the key without it. Use one secret across
// processes to correlate them. It returns "" for an event without a key.
func (e *Event) KeyHash(secret []byte) string {
	if e.key == "" {
		return ""
	}
	m := hmac.New(sha256.New, secret)
	var n [binary.MaxVarintLen64]byte
	m.Write(n[:binary.PutUvarint(n[:], uint64(len(e.scope)))])
	m.Write([]byte(e.scope))
	m.Write([]byte(e.key))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// Call is one call to Redis: one script run (with its WAIT, when the store
// waits for replicas).
type Call struct {
	// Script is the script's name: "claim", "legacy" (a claim of a record
	// in the format before 0.2), "complete", "release", "extend",
	// "checkpoint", "watch" (a waiter marking the record, Store.Await),
	// "lookup" or "forget". Store.Check's and Store.Scan's calls are not
	// reported.
	Script string
	// Start is when the call began.
	Start time.Time
	// Duration is how long it took, until its answer or its failure.
	Duration time.Duration
	// Err is its error, if it failed (including an error reply from Redis).
	Err error
}

// Observer receives every decision and every Redis call. Its methods are
// called synchronously, from the goroutine that made the decision or the
// call, so they must be fast and safe for concurrent use. ctx is the
// request's (or Do's) context, for tracing. A store calls its Observer
// through Safe: a panic in a method is recovered and logged, and never
// reaches the request.
type Observer interface {
	Event(ctx context.Context, e *Event)
	Redis(ctx context.Context, c *Call)
}

// Func is an Observer made of two functions; either may be nil.
type Func struct {
	OnEvent func(ctx context.Context, e *Event)
	OnRedis func(ctx context.Context, c *Call)
}

// Event calls f.OnEvent, if set.
func (f Func) Event(ctx context.Context, e *Event) {
	if f.OnEvent != nil {
		f.OnEvent(ctx, e)
	}
}

// Redis calls f.OnRedis, if set.
func (f Func) Redis(ctx context.Context, c *Call) {
	if f.OnRedis != nil {
		f.OnRedis(ctx, c)
	}
}

var _ Observer = Func{}
