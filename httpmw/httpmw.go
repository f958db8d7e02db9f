// Package httpmw is idemkey's Idempotency-Key middleware for net/http: any
// http.Handler, and so the standard mux, chi and others.
//
// A request with an Idempotency-Key header runs its handler once per (caller,
// key); every retry gets the stored response with Idempotent-Replayed: true,
// a retry while the first attempt runs gets 409, and a key reused for a
// different request gets 422. See the README for the full contract and
// Options for every setting.
//
// Handlers find their key, their lease, derived keys for downstream
// providers and recovery points in the request context: Key, Lease,
// DerivedKey, Checkpoint and RecoveryPoint.
package httpmw

import (
	"context"
	"net/http"

	"github.com/idemkey/idemkey/internal/httpcore"
	"github.com/idemkey/idemkey/redisstore"
)

// Options configures the middleware; the zero value gives the defaults. It is
// the same type as ginmw.Options. Its fields, each with its default:
//
//   - Header: the key's request header. Default: "Idempotency-Key".
//   - Optional: let requests without a key through unprotected (else 400). Default: false.
//   - Methods: the methods protected. Default: POST, PUT, PATCH, DELETE.
//   - Skip: a predicate for requests to let through. Default: nil.
//   - Scope: the caller a request comes from. Default: DefaultScope.
//   - Challenge: WWW-Authenticate of the 401 when Scope fails. Default: "Bearer".
//   - FingerprintHeaders: headers that take part in the fingerprint. Default: none.
//   - IgnoreFields: JSON members left out of the fingerprint. Default: none.
//   - MaxBodyBytes: larger request bodies get 413. Default: 1 MiB.
//   - BodyTimeout: a slower request body gets 408. Default: 10s.
//   - MaxJSONDepth: deeper JSON bodies get 400. Default: 64.
//   - MaxResponseBytes: the largest response body stored for replay. Default: 1 MiB.
//   - Store: which statuses are stored; others release the key. Default: DefaultStore.
//   - OmitHeaders: response headers never replayed. Default: DefaultOmitHeaders.
//   - RetryAfter: Retry-After of 409 and 503. Default: 1s.
//   - Wait: how long a duplicate waits for the first attempt before 409. Default: 0.
//   - Timeout: bound on each Redis call. Default: 2s.
//   - FailOpen: run unprotected when Redis is down (else 503). Default: false.
//   - ProblemBase: prefix of problem type URIs. Default: DefaultProblemBase.
//   - Logger: where unreported errors go. Default: slog.Default().
type Options = httpcore.Options

// DefaultScope is the default Options.Scope: a hash of the credential the
// request presents (Authorization, or X-API-Key), or "anonymous".
func DefaultScope(r *http.Request) (string, error) { return httpcore.DefaultScope(r) }

// DefaultStore is the default Options.Store: 200-499 except 408, 409, 425
// and 429.
func DefaultStore(status int) bool { return httpcore.DefaultStore(status) }

// DefaultOmitHeaders are the response headers never replayed by default.
var DefaultOmitHeaders = httpcore.DefaultOmitHeaders

// DefaultProblemBase is the default Options.ProblemBase.
const DefaultProblemBase = httpcore.DefaultProblemBase

// ErrNotProtected is returned by Checkpoint for a request without a lease.
var ErrNotProtected = httpcore.ErrNotProtected

// New returns middleware that protects the handlers it wraps with store. It
// panics if store is nil or opts holds a negative limit.
func New(store *redisstore.Store, opts Options) func(http.Handler) http.Handler {
	core := httpcore.New(store, opts)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			x, pass := core.Begin(w, r)
			switch {
			case pass:
				next.ServeHTTP(w, r)
			case x != nil:
				x.Run(func() { next.ServeHTTP(x.Recorder, x.Request) })
			}
		})
	}
}

// Key returns the request's idempotency key, or "" when it is not protected.
func Key(ctx context.Context) string { return httpcore.Key(ctx) }

// Lease returns the request's lease on its key, or nil when it is not
// protected. Its Attempt, RecoveryPoint and RecoveryData tell a handler
// whether an earlier attempt died and where it got to.
func Lease(ctx context.Context) *redisstore.Lease { return httpcore.Lease(ctx) }

// DerivedKey returns the idempotency key to hand a downstream provider (a
// payment API, say) for one step of the request: the same on every retry and
// takeover, unique per (caller, key, step). It returns "" when the request is
// not protected.
func DerivedKey(ctx context.Context, step string) string { return httpcore.DerivedKey(ctx, step) }

// Checkpoint records that the handler reached point, with data a later
// attempt needs to resume (say, the provider's charge ID), and extends the
// lease. If this attempt dies, the next retry finds them with RecoveryPoint.
// It returns ErrNotProtected when the request is not protected.
func Checkpoint(ctx context.Context, point string, data []byte) error {
	return httpcore.Checkpoint(ctx, point, data)
}

// RecoveryPoint returns the point and data an earlier attempt at this request
// checkpointed before it died, or "" and nil.
func RecoveryPoint(ctx context.Context) (point string, data []byte) {
	return httpcore.RecoveryPoint(ctx)
}
