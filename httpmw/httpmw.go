// Package httpmw is idemkey's Idempotency-Key middleware for net/http: any
// http.Handler, and so the standard mux, chi and others.
//
// A request with an Idempotency-Key header runs its handler once per (caller,
// key); every retry gets the stored response with Idempotent-Replayed: true,
// a retry while the first attempt runs gets 409, and a key reused for a
// different request gets 422. Options lists every setting with its default;
// this package is their home, and ginmw has the same.
//
// The handler runs on a context detached from the client's: a client that
// gives up does not stop it halfway. It is cancelled only when its lease is
// lost, at the store's MaxDuration, or at the end of a graceful stop's grace
// (its cause is then ErrShutdown; see below); pass it (r.Context()) to the
// calls the handler makes.
//
// The defaults have names of their own, to build on: DefaultScope (a hash
// of the Authorization or X-API-Key header; a request with neither gets
// ErrNoCredential and a 500 scope-required), SharedScope (the explicit
// opt-in to one scope for all callers), DefaultFinal (which statuses are
// stored) and DefaultProblemBase (where problem types point).
//
// Handlers find their key, their attempt, derived keys for downstream
// providers and recovery points in the request context: Key, Attempt,
// DerivedKey, Checkpoint and RecoveryPoint.
//
// # A graceful stop
//
// A server that stops on SIGTERM cancels the context it passed as
// Options.Shutdown and calls http.Server.Shutdown. What happens to a
// request, in order:
//
//  1. http.Server.Shutdown closes the listeners and the idle connections:
//     new connections go to the other instances.
//  2. A request that still reaches the middleware (on a connection that was
//     busy) is refused with 503 shutting-down, Retry-After and Connection:
//     close, before anything is claimed.
//  3. Handlers already running get Options.ShutdownGrace (default 5s) to
//     finish: their outcomes are stored and sent as on any other day.
//  4. The context of each handler still running is then cancelled, with
//     cause ErrShutdown. A final answer it still gives is stored; otherwise
//     its record is kept and only its lease ends, so that the client's
//     retry, on another instance, takes the key over at once as attempt 2,
//     with the last checkpoint (RecoveryPoint): the run is never forgotten,
//     and never run again as if it had not started.
//  5. http.Server.Shutdown returns once every handler has returned and its
//     outcome is stored or its lease ended: give it a timeout above
//     ShutdownGrace plus Options.Timeout (or the store's lease, if longer).
//
// A process that dies without this (SIGKILL, a crash) holds its keys until
// their leases end; the retries then take over from the last checkpoint.
package httpmw

import (
	"context"
	"net/http"

	"github.com/idemkey/idemkey/internal/httpcore"
	"github.com/idemkey/idemkey/redisstore"
)

// New returns middleware that protects the handlers it wraps with store. It
// panics if store is nil, opts holds a negative limit, or opts.Retention
// does not exceed the store's Lease and MaxDuration.
func New(store *redisstore.Store, opts Options) func(http.Handler) http.Handler {
	core := httpcore.New(store, opts.config())
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			x, pass := core.Begin(w, r, nil)
			switch {
			case pass != nil:
				next.ServeHTTP(w, pass)
			case x != nil:
				x.Run(func() { next.ServeHTTP(x.Recorder, x.Request) })
			}
		})
	}
}

// Key returns the request's idempotency key: "" when it has none, or the
// middleware has not seen it.
func Key(ctx context.Context) string { return httpcore.Key(ctx) }

// Attempt returns which attempt at its key the request runs as: 1 for the
// first, 2 or more when an earlier attempt ended without an answer (its
// process died, or it was cut off) and this one took the key over, so the
// side effects of that attempt may have happened: RecoveryPoint tells how
// far it got. It returns 0 when the request is not protected.
func Attempt(ctx context.Context) int { return httpcore.Attempt(ctx) }

// DerivedKey returns the idempotency key to hand a downstream provider (a
// payment API, say) for one step of the request: the same on every retry and
// takeover, unique per (caller, key, step). For a request the middleware
// runs unprotected (Optional without a key, FailOpen with Redis down) it is
// a fresh random key per request and step, so the provider never gets an
// empty key, but nothing dedupes that request's retries (Attempt is 0). It
// returns "" on a route without the middleware.
func DerivedKey(ctx context.Context, step string) string { return httpcore.DerivedKey(ctx, step) }

// Checkpoint records that the handler reached point, with data a later
// attempt needs to resume (say, the provider's charge ID), and extends the
// lease. If this attempt dies, the next retry finds them with RecoveryPoint.
// For a request the middleware runs unprotected (Optional without a key,
// FailOpen) there is nothing to record: it does nothing and returns nil. It
// returns ErrNotProtected on a route without the middleware.
func Checkpoint(ctx context.Context, point string, data []byte) error {
	return httpcore.Checkpoint(ctx, point, data)
}

// RecoveryPoint returns the point and data an earlier attempt at this request
// checkpointed before it died, or "" and nil.
func RecoveryPoint(ctx context.Context) (point string, data []byte) {
	return httpcore.RecoveryPoint(ctx)
}
