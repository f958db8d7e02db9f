package idemclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"time"
)

// Policy defaults, applied where a field is zero.
const (
	// defaultBaseDelay is the default Policy.BaseDelay.
	defaultBaseDelay = 100 * time.Millisecond
	// defaultMaxDelay is the default Policy.MaxDelay.
	defaultMaxDelay = 10 * time.Second
	// defaultMaxRetryAfter is the default Policy.MaxRetryAfter.
	defaultMaxRetryAfter = 30 * time.Second
)

// Policy is the retry policy: which outcomes are worth another attempt
// (Retryable), and how long to wait before retry number n (Delay). A
// server that says when to come back (Retry-After) is believed, within
// MaxRetryAfter; otherwise the wait is exponential backoff
// with full jitter: a uniform random duration in [0, min(MaxDelay,
// BaseDelay·2ⁿ⁻¹)), so that clients that failed together do not retry
// together.
//
// Policy has no state and no clock: the caller passes the time, and Rand is
// the only source of randomness, so tests can pin both. It is what the
// Transport uses, and what any other retry loop in this module should use
// (idemkey storm, for one), so that there is one implementation of the
// rules. The zero value is ready to use; each zero field means its default.
// A Policy is safe for concurrent use if its Rand is.
type Policy struct {
	// BaseDelay is the backoff ceiling of the first retry; it doubles with
	// each retry after that. Default: 100ms.
	BaseDelay time.Duration

	// MaxDelay caps the backoff ceiling. Default: 10s.
	MaxDelay time.Duration

	// MaxRetryAfter caps the wait a Retry-After header asks for: a server
	// asking for an hour gets retried after MaxRetryAfter.
	// Default: 30s.
	MaxRetryAfter time.Duration

	// Rand returns a uniformly distributed number in [0, 1) for the jitter.
	// It is called concurrently when the Transport is used concurrently.
	// Default: math/rand/v2's Float64.
	Rand func() float64
}

// backoff returns the wait before retry number retry (1 for the first
// retry; smaller values count as 1) when the server gave no Retry-After: a
// uniform random duration in [0, ceiling), where the ceiling is
// BaseDelay·2^(retry-1), capped at MaxDelay.
func (p Policy) backoff(retry int) time.Duration {
	base, ceiling := p.BaseDelay, p.MaxDelay
	if base <= 0 {
		base = defaultBaseDelay
	}
	if ceiling <= 0 {
		ceiling = defaultMaxDelay
	}
	c := base
	for i := 1; i < retry && c < ceiling; i++ {
		c *= 2
	}
	c = min(c, ceiling)
	random := p.Rand
	if random == nil {
		random = rand.Float64
	}
	f := random()
	if f < 0 || f >= 1 || math.IsNaN(f) {
		f = 0
	}
	return time.Duration(f * float64(c))
}

// Retryable reports whether an attempt's outcome is worth another attempt
// of the same request (with the same key, if keyed): the first half of the
// retry policy, Delay being the second. A network error is, unless a retry
// cannot fix it (TLS certificate verification, a plain-HTTP answer to
// HTTPS, an unknown host). A replay (Attempt.Replayed) never is: it is a
// stored outcome, and a retry gets it again. Otherwise 409 is when keyed
// (the first attempt is still in progress; without a key a 409 is the
// application's own conflict), and so are 429, 500, 502, 503 and 504;
// nothing else is. It is what the Transport retries, and what idemkey storm's
// load mode retries.
func (p Policy) Retryable(a Attempt, keyed bool) bool {
	if a.Err != nil {
		return !permanent(a.Err)
	}
	if a.Replayed {
		return false
	}
	switch a.Status {
	case http.StatusConflict:
		return keyed
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// permanent reports whether a failed attempt's error is one a retry cannot
// fix.
func permanent(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		record   tls.RecordHeaderError
		dns      *net.DNSError
	)
	switch {
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &hostname),
		errors.As(err, &invalid), errors.As(err, &record), errors.Is(err, http.ErrSchemeMismatch):
		return true
	case errors.As(err, &dns):
		return dns.IsNotFound
	}
	return false
}

// Delay returns the wait before retry number retry after a response whose
// Retry-After header value is retryAfter ("" when there was none or the
// attempt failed without a response), at time now: the Retry-After delay,
// clamped to [0, MaxRetryAfter], when it is valid (see ParseRetryAfter);
// the backoff otherwise: a uniform random duration in [0, ceiling),
// where the ceiling is BaseDelay·2^(retry-1), capped at MaxDelay.
func (p Policy) Delay(retry int, retryAfter string, now time.Time) time.Duration {
	if d, ok := ParseRetryAfter(retryAfter, now); ok {
		return p.clampRetryAfter(d)
	}
	return p.backoff(retry)
}

// clampRetryAfter bounds a Retry-After delay to [0, MaxRetryAfter].
func (p Policy) clampRetryAfter(d time.Duration) time.Duration {
	limit := p.MaxRetryAfter
	if limit <= 0 {
		limit = defaultMaxRetryAfter
	}
	return max(0, min(d, limit))
}

// ParseRetryAfter parses the value of a Retry-After header (RFC 9110
// section 10.2.3) received at time now, and returns the delay it asks for
// and true; or 0 and false when v is empty or malformed.
//
// v is either delay-seconds (digits; a decimal fraction such as "0.25" is
// accepted too) or an HTTP-date in any of the three formats of
// http.ParseTime. A date in the past gives 0. The delay is not capped (Policy.Delay
// caps it at MaxRetryAfter), except that it saturates instead of
// overflowing. Surrounding spaces and tabs are ignored.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return 0, false
	}
	if '0' <= v[0] && v[0] <= '9' {
		return parseSeconds(v)
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(0, t.Sub(now)), true
}

// parseSeconds parses digits with an optional fraction, saturating at the
// largest Duration.
func parseSeconds(v string) (time.Duration, bool) {
	whole, frac, dot := strings.Cut(v, ".")
	if whole == "" || !digits(whole) || (dot && (frac == "" || !digits(frac))) {
		return 0, false
	}
	const maxSeconds = int64(math.MaxInt64 / int64(time.Second))
	var secs int64
	for i := 0; i < len(whole); i++ {
		secs = secs*10 + int64(whole[i]-'0')
		if secs > maxSeconds {
			return time.Duration(math.MaxInt64), true
		}
	}
	d := time.Duration(secs) * time.Second
	unit := time.Second
	for i := 0; i < len(frac) && unit > 1; i++ {
		unit /= 10
		d += time.Duration(frac[i]-'0') * unit
	}
	if d < 0 { // the fraction pushed a saturated value over
		return time.Duration(math.MaxInt64), true
	}
	return d, true
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
