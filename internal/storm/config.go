package storm

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemkey/idemkey/internal/httpflag"
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

// ErrCount is wrapped by the error Run returns when Config.CountURL cannot
// be read before the storm; nothing has been sent then.
var ErrCount = errors.New("side-effect count unreadable")

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
	// key and its index (0 to Keys-1) and the bytes it returns are sent by
	// every duplicate of that key, so duplicates stay identical while
	// different keys may carry different payloads.
	BodyFor func(key string, i int) []byte
	// Header holds extra headers sent with every request. A "Host" entry
	// sets the request's Host. The key header is always set by the storm.
	Header http.Header
	// HeaderFor, when set, is called once per key like BodyFor; the headers
	// it returns replace those of the same name in Header for every
	// duplicate of that key (a caller per key, for instance). Their names
	// and values must be valid, or Run fails with ErrInvalidConfig.
	HeaderFor func(key string, i int) http.Header
	// KeyHeader is the request header that carries the idempotency key;
	// empty means "Idempotency-Key".
	KeyHeader string
	// Keys is the number of distinct idempotency keys; 0 means 100.
	Keys int
	// Dups is the number of identical requests sent per key; 0 means 10.
	Dups int
	// Concurrency is the number of concurrent workers; 0 means 64.
	Concurrency int
	// Timeout bounds each request: its attempts, including reading the
	// response body, and with Retry the waits between them; 0 means 10s.
	Timeout time.Duration
	// Retry makes a worker ask again, with the same key, after an answer
	// that is not final (409, 408, 425, 429, 503 without the replay
	// header, or a transport error), after its Retry-After, until a final
	// answer arrives or Timeout runs out. The late probe retries the same
	// way.
	Retry bool
	// MaxRetries bounds the retries of one request when Retry is set, so a
	// server answering "Retry-After: 0" cannot spin a worker; 0 means 100.
	MaxRetries int
	// NoProbe skips the late probe (see the package documentation).
	NoProbe bool
	// CountURL, when set, is read with GET before and after the storm; the
	// JSON number at CountField in its answer counts the side effects the
	// server made. The storm fails unless it grew by exactly the number of
	// keys that passed. The request carries no storm headers.
	CountURL string
	// CountField names the number in CountURL's JSON object; dots reach
	// into nested objects ("stats.charges"). Required with CountURL.
	CountField string
	// MaxFailures bounds how many keys Report.Failures and
	// Report.Inconclusive list each; 0 means 10, a negative value lists
	// all of them.
	MaxFailures int
	// KeyPrefix is prepended to every generated key, e.g. to find the
	// storm's keys in server logs. It must be visible ASCII.
	KeyPrefix string
	// Client is the HTTP client to use. When nil, Run builds a client whose
	// transport keeps Concurrency idle keep-alive connections to the host
	// and that does not follow redirects, and closes it at the end; the
	// late probe then uses a transport of its own that opens a fresh
	// connection for every request. A Client given here serves the probe
	// too.
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
	if !httpflag.IsToken(cfg.Method) {
		return bad("invalid method %q", cfg.Method)
	}
	target, err := httpflag.ParseURL(cfg.URL)
	if err != nil {
		return bad("%v", err)
	}
	if cfg.KeyHeader == "" {
		cfg.KeyHeader = headerIdempotencyKey
	}
	if !httpflag.IsToken(cfg.KeyHeader) {
		return bad("invalid key header name %q", cfg.KeyHeader)
	}
	cfg.KeyHeader = http.CanonicalHeaderKey(cfg.KeyHeader)
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
	if err := checkHeader(cfg.Header); err != nil {
		return bad("%v", err)
	}
	for i := 0; i < len(cfg.KeyPrefix); i++ {
		if c := cfg.KeyPrefix[i]; c <= ' ' || c > '~' {
			return bad("key prefix %q: want visible ASCII", cfg.KeyPrefix)
		}
	}
	if cfg.CountURL != "" || cfg.CountField != "" {
		if _, err := httpflag.ParseURL(cfg.CountURL); err != nil {
			return bad("count URL: %v", err)
		}
		if cfg.CountField == "" {
			return bad("count field is required with a count URL")
		}
	}
	return cfg, target, nil
}

// checkHeader reports the first invalid header name or value in h.
func checkHeader(h http.Header) error {
	for name, values := range h {
		if !httpflag.IsToken(name) {
			return fmt.Errorf("invalid header name %q", name)
		}
		for _, v := range values {
			if strings.ContainsAny(v, "\r\n\x00") {
				return fmt.Errorf("invalid value for header %s", name)
			}
		}
	}
	return nil
}
