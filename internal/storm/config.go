package storm

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

const (
	headerIdempotencyKey = "Idempotency-Key"
	headerReplayed       = "Idempotent-Replayed"

	defaultKeys        = 100
	defaultDups        = 10
	defaultConcurrency = 64
	defaultTimeout     = 10 * time.Second
	defaultMaxRetries  = 100
	defaultMaxFailures = 10

	// defaultRetryAfter is the wait before retrying a 409 that carries no
	// usable Retry-After header.
	defaultRetryAfter = time.Second
	// maxRetryAfter caps a single Retry-After wait.
	maxRetryAfter = 30 * time.Second
	// maxRequests bounds Keys*Dups.
	maxRequests = 100_000_000
	// snippetLen is how many leading body bytes are kept for failure reasons.
	snippetLen = 48
	// progressInterval is how often the progress line is rewritten.
	progressInterval = 200 * time.Millisecond
)

// ErrInvalidConfig is wrapped by the errors Run returns for a Config it
// cannot run.
var ErrInvalidConfig = errors.New("invalid storm config")

// Config describes one storm. The zero value of every optional field selects
// a documented default.
type Config struct {
	// URL is the absolute http or https URL every request is sent to.
	URL string
	// Method is the HTTP method; empty means POST.
	Method string
	// Body is the request body sent with every request; it may be empty.
	// When it is non-empty and Header has no Content-Type,
	// "Content-Type: application/json" is sent.
	Body []byte
	// BodyFor, when set, overrides Body: it is called once per key with the
	// key and its ordinal (0 to Keys-1) and the bytes it returns are sent by
	// every duplicate of that key, so duplicates stay identical while
	// different keys may carry different payloads.
	BodyFor func(key string, i int) []byte
	// Header holds extra headers sent with every request. A "Host" entry
	// sets the request's Host. Idempotency-Key is always set by the storm.
	Header http.Header
	// Keys is the number of distinct idempotency keys; 0 means 100.
	Keys int
	// Dups is the number of identical requests sent per key; 0 means 10.
	Dups int
	// Concurrency is the number of concurrent workers; 0 means 64.
	Concurrency int
	// Timeout bounds each individual attempt, including reading the
	// response body; 0 means 10s.
	Timeout time.Duration
	// Retry409 makes a worker retry a non-replayed 409 answer after its
	// Retry-After delay until it gets a different answer.
	Retry409 bool
	// MaxRetries bounds the retries of one request when Retry409 is set;
	// 0 means 100.
	MaxRetries int
	// MaxFailures bounds how many failing keys Report.Failures lists;
	// 0 means 10, a negative value lists all of them.
	MaxFailures int
	// KeyPrefix is prepended to every generated key, e.g. to find the
	// storm's keys in server logs.
	KeyPrefix string
	// Client is the HTTP client to use. When nil, Run builds a client whose
	// transport keeps Concurrency idle keep-alive connections to the host
	// and that does not follow redirects, and closes it at the end.
	Client *http.Client
	// Progress, when non-nil, receives a progress line rewritten in place
	// with carriage returns every 200ms, cleared when the storm ends. Only
	// point it at a terminal.
	Progress io.Writer
}

// normalize applies defaults and validates cfg.
func normalize(cfg Config) (Config, *url.URL, error) {
	bad := func(format string, args ...any) (Config, *url.URL, error) {
		return cfg, nil, fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if cfg.Method == "" {
		cfg.Method = http.MethodPost
	}
	if !isToken(cfg.Method) {
		return bad("invalid method %q", cfg.Method)
	}
	target, err := parseURL(cfg.URL)
	if err != nil {
		return bad("%v", err)
	}
	switch {
	case cfg.Keys < 0:
		return bad("keys must not be negative")
	case cfg.Dups < 0:
		return bad("dups must not be negative")
	case cfg.Concurrency < 0:
		return bad("concurrency must not be negative")
	}
	if cfg.Keys == 0 {
		cfg.Keys = defaultKeys
	}
	if cfg.Dups == 0 {
		cfg.Dups = defaultDups
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = defaultConcurrency
	}
	if int64(cfg.Keys)*int64(cfg.Dups) > maxRequests {
		return bad("keys*dups must not exceed %d", maxRequests)
	}
	switch {
	case cfg.Timeout < 0:
		return bad("timeout must not be negative")
	case cfg.Timeout == 0:
		cfg.Timeout = defaultTimeout
	}
	switch {
	case cfg.MaxRetries < 0:
		return bad("max retries must not be negative")
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = defaultMaxRetries
	}
	if cfg.MaxFailures == 0 {
		cfg.MaxFailures = defaultMaxFailures
	}
	for name, values := range cfg.Header {
		if !isToken(name) {
			return bad("invalid header name %q", name)
		}
		for _, v := range values {
			if strings.ContainsAny(v, "\r\n\x00") {
				return bad("invalid value for header %s", name)
			}
		}
	}
	return cfg, target, nil
}

// parseURL parses and checks a storm target: an absolute http or https URL
// with a host.
func parseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("URL is required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("invalid URL %q: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("invalid URL %q: scheme must be http or https", raw)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("invalid URL %q: missing host", raw)
	}
	return u, nil
}

// isToken reports whether s is a non-empty RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
