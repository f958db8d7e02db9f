package httpmw

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemkey/idemkey/internal/httpcore"
)

//go:generate go run ../internal/optgen

// Options configures the middleware. The zero value gives the defaults.
// This is the one list of the middleware's options: package ginmw has the
// same (internal/optgen writes them), with Scope and Skip taking the
// *gin.Context, and ErrorHandler for Gin's error pattern.
type Options struct {
	// Header is the request header that carries the idempotency key: a bare
	// token or an RFC 8941 string, 1 to 255 visible ASCII characters.
	// Default: "Idempotency-Key".
	Header string

	// Optional lets requests without a key through, unprotected; otherwise
	// they get 400. Their handlers get Attempt 0, a fresh random DerivedKey
	// per request (never an empty key, but nothing dedupes their retries),
	// and a Checkpoint that records nothing and returns nil. Default: false
	// (the key is required).
	Optional bool

	// Methods are the methods the middleware protects; requests with other
	// methods pass through untouched. Default: POST, PUT, PATCH, DELETE.
	Methods []string

	// Skip, if set, lets a request through untouched when it returns true,
	// for routes that need no protection. Default: nil.
	Skip func(r *http.Request) bool

	// Scope returns the caller a request comes from, such as an account or
	// user ID from your authentication: equal keys from different callers
	// are different records, so one can never see, block or replay
	// another's. It is hashed into the record's name, never stored. An error
	// answers 401 caller-unknown (the error goes to the log, not the
	// client); an empty scope answers 500 scope-required. With net/http,
	// r.PathValue is set only when the middleware wraps the route's handler,
	// not the whole mux. Default: DefaultScope, a hash of the Authorization
	// or X-API-Key header, refusing requests with neither; SharedScope
	// opts into one scope for all. The default follows the credential, not
	// the caller: a client that refreshes its bearer token between two
	// tries of one operation lands in a new scope and the retry runs
	// again, so the middleware logs a warning at its first use; set Scope
	// unless callers present long-lived API keys.
	Scope func(r *http.Request) (string, error)

	// Challenge is the WWW-Authenticate value sent with the 401 answered
	// when Scope fails. Authentication is best done before the middleware,
	// so that unauthenticated requests never reach it. Default: "Bearer".
	Challenge string

	// FingerprintHeaders are request headers that take part in the
	// fingerprint, for headers that change what a request means (such as
	// an API version). Default: none.
	FingerprintHeaders []string

	// IgnoreFields are JSON body members left out of the fingerprint, as
	// dotted paths from the top-level object ("client_ts",
	// "meta.sent_at"), for fields that differ between retries of one
	// request. They apply to JSON bodies without a Content-Encoding.
	// Default: none.
	IgnoreFields []string

	// MaxBodyBytes is the largest request body the middleware reads and
	// fingerprints; a larger one gets 413 before anything is stored.
	// Default: 1 MiB.
	MaxBodyBytes int64

	// BodyTimeout bounds how long reading the request body may take, so a
	// client that trickles its body (slow loris) gets 408 and never holds a
	// key. Default: 10s.
	BodyTimeout time.Duration

	// MaxJSONDepth is how deeply a JSON body may nest; deeper bodies get
	// 400. Default: 64.
	MaxJSONDepth int

	// MaxResponseBytes is the largest response body stored for replay. A
	// larger response still reaches the first client whole and is never
	// run again; its replays get the original status and headers with a
	// problem+json body of type response-too-large in place of the body.
	// It also bounds replays: a stored response that decompresses to more
	// than MaxResponseBytes plus 64 KiB of headers is taken for a corrupt
	// record and answered 500 stored-response-unreadable (it is not run
	// again), so lowering it makes larger responses stored before
	// unreadable until Retention has passed. Default: 1 MiB.
	MaxResponseBytes int

	// Final decides which response statuses are final answers, stored and
	// replayed. For the others the key is released, so a retry with the same
	// key runs the handler again. A panicking handler always releases the key.
	// A handler that returns without writing has answered 200 with no body,
	// which is stored like any 200: write a 5xx to give up instead.
	// Default: DefaultFinal (200-499 except 408, 409, 425 and 429).
	Final func(status int) bool

	// Retention, if set, is how long the outcomes of the routes this
	// middleware protects are kept and replayed, in place of the store's
	// Options.Retention: a payment route 24h, a webhook consumer 7 days, a
	// cheap lookup 10 minutes, each route group with a middleware of its
	// own on one store. A retry after it runs the handler again. The lease
	// stays the store's. It must exceed the store's Lease and MaxDuration:
	// New panics otherwise (redisstore.Store.ValidateRetention says why).
	// Default: 0 (the store's).
	Retention time.Duration

	// OmitHeaders are more response headers never stored or replayed, on
	// top of those that never are: hop-by-hop headers, Date, Content-Length
	// and Set-Cookie (under any spelling of the name). Headers set before the
	// middleware ran (by outer middleware) are never stored either.
	// Default: none.
	OmitHeaders []string

	// RetryAfter is the Retry-After sent with 409 (the request is in
	// progress) and 503 (Redis is unreachable), rounded up to whole seconds.
	// Keep it near the handler's usual run time, not the lease. Default: 1s.
	RetryAfter time.Duration

	// Wait makes a duplicate of a running request wait up to this long for
	// the first one to finish and then answer with its replay, instead of
	// 409 at once; a retry storm then sees answers, not conflicts. A
	// duplicate of a request this process runs is told at once; one of a
	// request another process runs is woken through Redis pub/sub when the
	// outcome is stored, with polling as the fallback. Default: 0 (409 at
	// once).
	Wait time.Duration

	// Timeout bounds each call to Redis. A claim that fails or times out
	// answers 503 (or runs unprotected with FailOpen). Storing an outcome
	// (or releasing a key) after the handler ran is the exception: the side
	// effect has happened, so it keeps trying for up to the longer of
	// Timeout and the store's lease, holding the response meanwhile; if it
	// still fails, the response is sent and the log says the outcome may not
	// be stored. Default: 2s.
	Timeout time.Duration

	// FailOpen runs the handler without protection when Redis cannot be
	// reached (a network error or a timeout), instead of answering 503.
	// Retries may then run it twice. Any answer Redis gives (a replication
	// shortfall, an error reply, an unexpected reply) is never a reason to
	// run unprotected, nor is the store's refusal of a Redis that may evict
	// or does not persist (RequireNoEviction, RequirePersistence): 503.
	// Default: false (fail closed).
	FailOpen bool

	// ProblemBase prefixes the slug of each problem type to make the
	// problem's type URI. Default: DefaultProblemBase.
	ProblemBase string

	// Shutdown, when done, starts a graceful stop. New requests are
	// refused with 503 shutting-down (with Retry-After and Connection:
	// close) before anything is claimed, so their retries go to another
	// instance; handlers still running get ShutdownGrace to finish and
	// store their outcomes as usual. Then the context of each one still
	// running is cancelled with cause ErrShutdown, and its record is kept
	// with only its lease ended, so that its retry, on another instance,
	// takes it over at once as the next attempt, from its last checkpoint.
	// Pass a context your server cancels when it begins to stop (on
	// SIGTERM), at or before http.Server.Shutdown, and give that a timeout
	// above ShutdownGrace plus Timeout (or the store's lease, if longer):
	// the time a cut-off run takes to end its lease. A handler's context is
	// otherwise detached from the client's: a client that gives up (times
	// out, disconnects) does not stop the run, which completes and stores
	// its outcome for the client's retry. Default: nil (only a lost lease or
	// MaxDuration cancel it).
	Shutdown context.Context

	// ShutdownGrace is how long handlers still running when Shutdown is
	// done may go on before their contexts are cancelled. Keep it below
	// the time your platform waits after SIGTERM, less the time to end the
	// cut-off runs' leases (see Shutdown). A negative value cancels them at
	// once. Default: 5s.
	ShutdownGrace time.Duration

	// Logger receives the errors the client is not told about, such as a
	// failure to store an outcome after the response was made. Default:
	// slog.Default().
	Logger *slog.Logger

	// Compress stores responses compressed with zstd (with their headers),
	// each only if that makes it smaller; a replay is byte-identical to the
	// original either way, and responses stored compressed replay whatever
	// this says later. It trades CPU on the first execution for Redis
	// memory; replays cost about the same, as there is less to read from
	// Redis. Dictionaries shrink small bodies much more. What it saves and
	// costs for typical bodies: the internal/footprint benchmarks, with the
	// other figures in bench/RESULTS.md. Default: false.
	Compress bool

	// Dictionaries are zstd dictionaries for compressing stored responses,
	// as idemkey dict train makes them. A dictionary trained on a route's
	// responses shrinks them much more than Compress alone, at a higher
	// CPU cost on the first execution (figures: as for Compress). The
	// first dictionary compresses (and turns Compress on); each one
	// decodes the responses compressed with it, which carry its ID. To
	// replace a dictionary, put the new one first and keep the old one
	// after it until Retention has passed: a response whose dictionary is
	// gone cannot be replayed (500 stored-response-unreadable; it is not
	// run again). For a dictionary per route, give each route its own
	// middleware with its own Dictionaries. A dictionary trained on real
	// responses holds fragments of them: keep it as safe as that data. New
	// panics if one is not a zstd dictionary or two share an ID. Default:
	// none.
	Dictionaries [][]byte
}

// DefaultProblemBase is the default Options.ProblemBase: the problem types
// are documented there, one anchor per slug.
const DefaultProblemBase = httpcore.DefaultProblemBase

var (
	// ErrNoCredential is returned by DefaultScope for a request that
	// presents neither an Authorization nor an X-API-Key header; the
	// middleware answers it with 500 scope-required.
	ErrNoCredential = httpcore.ErrNoCredential

	// ErrNotProtected is returned by Checkpoint for a request no
	// idempotency middleware has seen: a route without it, or one it let
	// through untouched (a safe method, Skip). A request it runs
	// unprotected (Optional without a key, FailOpen) checkpoints nothing
	// and gets nil.
	ErrNotProtected = httpcore.ErrNotProtected

	// ErrShutdown is the cause of the cancellation a handler's context sees
	// when it is still running ShutdownGrace after Options.Shutdown is done.
	ErrShutdown = httpcore.ErrShutdown
)

// DefaultScope is the default Options.Scope. It derives the caller from the
// credential the request presents: a hash of its Authorization header, or
// failing that of its X-API-Key header, so two callers with different
// credentials never share a key, and no credential is stored. A request with
// neither fails with ErrNoCredential, and the middleware refuses it with 500
// scope-required: an application with its own authentication (a session
// cookie, a custom header) must set Options.Scope to its authenticated
// caller.
//
// It suits long-lived API keys only: a short-lived bearer token refreshed
// between two tries of one operation puts them in different scopes, so the
// operation runs twice. A middleware on the default scope says so in a
// warning at its first use; idemkeytest.Config.SameCallerHeader (and
// idemkey verify --same-caller-header) test a handler for it.
func DefaultScope(r *http.Request) (string, error) { return httpcore.DefaultScope(r) }

// SharedScope returns an Options.Scope that puts every caller in the scope
// name: whoever sends a key gets its outcome. Use it only where there are no
// callers to keep apart (a single-tenant service, an internal endpoint),
// never on an endpoint that serves several users. It panics if name is
// empty.
func SharedScope(name string) func(*http.Request) (string, error) {
	httpcore.CheckSharedScope(name)
	return func(*http.Request) (string, error) { return name, nil }
}

// DefaultFinal is the default Options.Final: statuses 200 to 499 are the
// request's outcome, except 408, 409, 425 and 429, which say "try again"
// rather than "this is the answer". 1xx and 5xx are not stored.
func DefaultFinal(status int) bool { return httpcore.DefaultFinal(status) }
