package httpcore

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"time"
)

// adapterConfig is the part of Config that is not an option of
// httpmw.Options: what an adapter sets, and what withDefaults derives.
type adapterConfig struct {
	// Route, set by the adapter, returns the route's pattern for the
	// observer (Gin's FullPath), or "" to use the ServeMux pattern, else
	// "unmatched".
	Route func(r *http.Request, c any) string

	// codec stores and replays responses, compressed as Compress and
	// Dictionaries say; withDefaults makes it.
	codec *ResponseCodec

	// defaultScope says that Scope was not set: withDefaults put
	// DefaultScope there, whose hazard the Guard logs at first use.
	defaultScope bool
}

// DefaultProblemBase is the default Options.ProblemBase: the problem types
// are documented there, one anchor per slug.
const DefaultProblemBase = "https://github.com/idemkey/idemkey/blob/main/docs/problems.md#"

// alwaysOmitted are the response headers never stored or replayed: they
// belong to one response, or to its connection, and a replay with them would
// be ill-formed or wrong. Options.OmitHeaders adds to them.
var alwaysOmitted = []string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
	"Date", "Content-Length", "Set-Cookie",
}

// describeBody are the response headers that describe the body itself: a
// replay that carries a problem in place of an oversize body drops them.
var describeBody = []string{
	"Content-Length", "Content-Encoding", "Content-Range", "Content-Md5", "Content-Digest", "Repr-Digest",
	"Digest", "Etag", "Last-Modified", "Accept-Ranges",
}

// DefaultFinal is the default Config.Final: 200 to 499 except 408, 409, 425
// and 429 (see httpmw.DefaultFinal).
func DefaultFinal(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status >= 200 && status < 500
}

// ErrNoCredential is returned by DefaultScope for a request that presents
// neither an Authorization nor an X-API-Key header. The middleware answers it
// with 500 scope-required: the service has not told it who its callers are.
var ErrNoCredential = errors.New("idemkey: the request presents no credential the default scope knows")

// DefaultScope is the default scope: a hash of the Authorization or
// X-API-Key header, or ErrNoCredential (see httpmw.DefaultScope).
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
	return "", ErrNoCredential
}

// CheckSharedScope panics if name cannot be a shared scope: the adapters'
// SharedScope call it.
func CheckSharedScope(name string) {
	if name == "" {
		panic("idemkey: SharedScope with an empty name")
	}
}

// withDefaults returns o with every zero field set to its default, and
// panics on settings no program should make (a negative limit, a dictionary
// that is not one).
func (o Config) withDefaults() Config {
	if o.Header == "" {
		o.Header = "Idempotency-Key"
	}
	o.Header = http.CanonicalHeaderKey(o.Header)
	if o.Methods == nil {
		o.Methods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
	}
	if o.Scope == nil {
		o.Scope = func(r *http.Request, _ any) (string, error) { return DefaultScope(r) }
		o.defaultScope = true
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
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if o.Final == nil {
		o.Final = DefaultFinal
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = 5 * time.Second
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
	o.Dictionaries = slices.Clone(o.Dictionaries)
	codec, err := NewResponseCodec(Compression{On: o.Compress, Dictionaries: o.Dictionaries, MaxResponseBytes: o.MaxResponseBytes})
	if err != nil {
		panic(err.Error() + " (Options.Dictionaries)")
	}
	o.codec = codec
	return o
}
