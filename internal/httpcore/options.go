package httpcore

import (
	"crypto/sha256"
	"encoding/base64"
	"log/slog"
	"net/http"
	"slices"
	"time"
)

// Options configures the Idempotency-Key middleware of packages ginmw and
// httpmw. The zero value gives the defaults.
type Options struct {
	// Header is the request header that carries the idempotency key: a bare
	// token or an RFC 8941 string, 1 to 255 visible ASCII characters.
	// Default: "Idempotency-Key".
	Header string

	// Optional lets requests without a key through, unprotected; otherwise
	// they get 400. Default: false (the key is required).
	Optional bool

	// Methods are the methods the middleware protects; requests with other
	// methods pass through untouched. Default: POST, PUT, PATCH, DELETE.
	Methods []string

	// Skip, if set, lets a request through untouched when it returns true,
	// for routes that need no protection. Default: nil.
	Skip func(r *http.Request) bool

	// Scope returns the caller a request comes from, such as an account ID:
	// equal keys from different callers are different records, so one can
	// never see, block or replay another's. It is stored in clear in the
	// record: never return a credential itself. An error answers 401. With
	// net/http, r.PathValue is set only when the middleware wraps the
	// route's handler, not the whole mux. Default: DefaultScope, a hash of
	// the credential presented.
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
	// request. Default: none.
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
	// Default: 1 MiB.
	MaxResponseBytes int

	// Store decides which response statuses are outcomes to store and
	// replay. For the others the key is released, so a retry with the same
	// key runs the handler again. A panicking handler always releases the key.
	// A handler that returns without writing has answered 200 with no body,
	// which is stored like any 200: write a 5xx to give up instead.
	// Default: DefaultStore (200-499 except 408, 409, 425 and 429).
	Store func(status int) bool

	// OmitHeaders are response headers never stored or replayed. Headers
	// set before the middleware ran (by outer middleware) are never stored
	// either. Default: DefaultOmitHeaders (hop-by-hop headers, Date,
	// Content-Length, Set-Cookie).
	OmitHeaders []string

	// RetryAfter is the Retry-After sent with 409 (the request is in
	// progress) and 503 (Redis is unreachable), rounded up to whole seconds.
	// Keep it near the handler's usual run time, not the lease. Default: 1s.
	RetryAfter time.Duration

	// Wait makes a duplicate of a running request wait up to this long for
	// the first one to finish and then answer with its replay, instead of
	// 409 at once; a retry storm then sees answers, not conflicts. The wait
	// polls Redis with backoff from 5ms to 100ms. Default: 0 (409 at once).
	Wait time.Duration

	// Timeout bounds each call to Redis. A claim that fails or times out
	// answers 503 (or runs unprotected with FailOpen). It takes effect only
	// if the go-redis client has ContextTimeoutEnabled. Default: 2s.
	Timeout time.Duration

	// FailOpen runs the handler without protection when Redis cannot be
	// reached, instead of answering 503. Retries may then run it twice.
	// Default: false (fail closed).
	FailOpen bool

	// ProblemBase prefixes the slug of each problem type to make the
	// problem's type URI. Default: DefaultProblemBase.
	ProblemBase string

	// Logger receives the errors the client is not told about, such as a
	// failure to store an outcome after the response was made. Default:
	// slog.Default().
	Logger *slog.Logger
}

// DefaultProblemBase is the default Options.ProblemBase: the problem types
// are documented there, one anchor per slug.
const DefaultProblemBase = "https://github.com/idemkey/idemkey/blob/main/docs/problems.md#"

// DefaultOmitHeaders are the response headers never replayed by default:
// hop-by-hop headers, and headers that belong to one response only.
var DefaultOmitHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
	"Date", "Content-Length", "Set-Cookie",
}

// DefaultStore is the default Options.Store: statuses 200 to 499 are the
// request's outcome, except 408, 409, 425 and 429, which say "try again"
// rather than "this is the answer". 1xx and 5xx are not stored.
func DefaultStore(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status >= 200 && status < 500
}

// DefaultScope is the default Options.Scope. It derives the caller from the
// credential the request presents: a hash of its Authorization header, or
// failing that of its X-API-Key header, so two callers with different
// credentials never share a key, and no credential is stored. Requests with
// neither header share the scope "anonymous". Set Options.Scope to use your
// own notion of a caller, such as an account ID from your authentication.
func DefaultScope(r *http.Request) (string, error) {
	for _, h := range [...]string{"Authorization", "X-Api-Key"} {
		if vs := r.Header.Values(h); len(vs) > 0 {
			var stack [256]byte
			b := append(stack[:0], h...)
			for _, v := range vs {
				b = append(append(b, 0), v...)
			}
			sum := sha256.Sum256(b)
			return "cred:" + base64.RawURLEncoding.EncodeToString(sum[:18]), nil
		}
	}
	return "anonymous", nil
}

// withDefaults returns o with every zero field set to its default, and
// panics on settings no program should make.
func (o Options) withDefaults() Options {
	if o.Header == "" {
		o.Header = "Idempotency-Key"
	}
	o.Header = http.CanonicalHeaderKey(o.Header)
	if o.Methods == nil {
		o.Methods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
	}
	if o.Scope == nil {
		o.Scope = DefaultScope
	}
	if o.Challenge == "" {
		o.Challenge = "Bearer"
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 1 << 20
	}
	if o.BodyTimeout == 0 {
		o.BodyTimeout = 10 * time.Second
	}
	if o.MaxJSONDepth == 0 {
		o.MaxJSONDepth = 64
	}
	if o.MaxResponseBytes == 0 {
		o.MaxResponseBytes = 1 << 20
	}
	if o.Store == nil {
		o.Store = DefaultStore
	}
	if o.OmitHeaders == nil {
		o.OmitHeaders = DefaultOmitHeaders
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	if o.ProblemBase == "" {
		o.ProblemBase = DefaultProblemBase
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxBodyBytes < 0 || o.BodyTimeout < 0 || o.MaxJSONDepth < 0 || o.MaxResponseBytes < 0 ||
		o.RetryAfter < 0 || o.Wait < 0 || o.Timeout < 0 {
		panic("idemkey: negative limit in Options")
	}
	o.Methods = slices.Clone(o.Methods)
	o.OmitHeaders = slices.Clone(o.OmitHeaders)
	for i, h := range o.OmitHeaders {
		o.OmitHeaders[i] = http.CanonicalHeaderKey(h)
	}
	o.FingerprintHeaders = slices.Clone(o.FingerprintHeaders)
	for i, h := range o.FingerprintHeaders {
		o.FingerprintHeaders[i] = http.CanonicalHeaderKey(h)
	}
	slices.Sort(o.FingerprintHeaders)
	return o
}
