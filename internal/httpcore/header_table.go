package httpcore

// The header names and values that a version 2 stored response names by
// index (see response.go). Stored responses live for the retention, and a
// newer release must read what an older one wrote: never remove, reorder or
// change an entry. docs/spec.md (§11.3) lists them, and they are frozen for
// Spec 1: an index past the end of a list is a corrupt response, which an
// older release refuses, so an entry added is a change an older reader
// cannot read, a new major version of the format (docs/spec.md §2), and
// needs a new response version byte. TestSpecHeaderTables holds the spec's
// lists to these.
//
// Names are in canonical form (http.CanonicalHeaderKey), as http.Header
// keeps them; a name stored in another spelling is stored literally.

var headerNameList = []string{
	"Content-Type",
	"Location",
	"Content-Encoding",
	"Cache-Control",
	"Etag",
	"Vary",
	"Link",
	"Content-Language",
	"Content-Disposition",
	"Last-Modified",
	"Expires",
	"Retry-After",
	"X-Request-Id",
	"X-Content-Type-Options",
	"Access-Control-Allow-Origin",
	"Access-Control-Allow-Credentials",
	"Access-Control-Expose-Headers",
	"Strict-Transport-Security",
	"Content-Security-Policy",
	"X-Frame-Options",
	"Referrer-Policy",
	"Content-Location",
	"Allow",
	"Www-Authenticate",
	"Accept-Ranges",
	"Content-Range",
	"Content-Digest",
	"Repr-Digest",
	"Pragma",
	"X-Correlation-Id",
	"Request-Id",
	"Traceparent",
	"Server-Timing",
	"Preference-Applied",
	"Deprecation",
	"Sunset",
	"Ratelimit-Limit",
	"Ratelimit-Remaining",
	"Ratelimit-Reset",
	"X-Ratelimit-Limit",
	"X-Ratelimit-Remaining",
	"X-Ratelimit-Reset",
	"Idempotency-Key",
	"X-Version",
	"Api-Version",
}

var headerValueList = []string{
	"application/json",
	"application/json; charset=utf-8", // Gin's c.JSON
	"text/plain; charset=utf-8",       // net/http's default for text, http.Error
	"application/problem+json",
	"application/octet-stream",
	"text/html; charset=utf-8",
	"application/xml",
	"application/xml; charset=utf-8",
	"text/plain",
	"text/html",
	"application/json;charset=UTF-8",
	"application/json; charset=UTF-8",
	"application/problem+json; charset=utf-8",
	"application/hal+json",
	"application/vnd.api+json",
	"application/x-ndjson",
	"text/csv",
	"application/pdf",
	"image/png",
	"gzip",
	"br",
	"zstd",
	"deflate",
	"identity",
	"no-store",
	"no-cache",
	"private",
	"no-cache, no-store, must-revalidate",
	"private, no-store",
	"max-age=0",
	"public",
	"Accept-Encoding",
	"Origin",
	"Accept",
	"Authorization",
	"*",
	"true",
	"nosniff",
	"DENY",
	"SAMEORIGIN",
	"bytes",
	"none",
	"no-referrer",
	"strict-origin-when-cross-origin",
	"max-age=31536000",
	"max-age=31536000; includeSubDomains",
	"1",
	"0",
}

// headerNames and headerValues index the lists, for the encoder.
var (
	headerNames  = index(headerNameList)
	headerValues = index(headerValueList)
)

func index(list []string) map[string]int {
	m := make(map[string]int, len(list))
	for i, s := range list {
		if _, dup := m[s]; dup {
			panic("httpcore: duplicate entry in a header table: " + s)
		}
		m[s] = i
	}
	return m
}
