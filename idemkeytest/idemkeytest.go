package idemkeytest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/internal/verify"
)

// Config describes the endpoint under test. Only Path, Body and
// SideEffects are required; every other field's zero value takes its
// default or skips the check that needs it.
type Config struct {
	// Method is every request's method. Default: POST.
	Method string

	// Path is the endpoint's path, with its query if it takes one, e.g.
	// "/v1/payments". Required.
	Path string

	// Body is every request's body, e.g. a JSON document. Required unless
	// BodyFor is set.
	Body []byte

	// BodyFor, when set, gives the body for each key instead of Body, for
	// endpoints that want one request per key to differ (a reference that
	// must be unique); it gets "" for the request without a key. Called
	// from several goroutines at once. Default: Body for every key.
	BodyFor func(key string) []byte

	// OtherBody is another request for the mismatch check: the same key
	// with it must get 422. Default: the body with one JSON value changed
	// (the first number plus one, else the first string, else the first
	// boolean); the check is skipped for a body that is not JSON without it.
	OtherBody []byte

	// Header is sent on every request: the caller's credentials, and
	// whatever else the handler needs. A Host header sets the requests'
	// host. Content-Type defaults to application/json when there is a body.
	// It must not hold the key header: each check sets its own key.
	//
	// The middleware's default scope (httpmw.DefaultScope, ginmw's too)
	// refuses a request with neither an Authorization nor an X-API-Key
	// header (500, scope-required): give one here, e.g.
	// {"Authorization": {"Bearer alice"}}, or build the handler with a
	// Scope of its own (httpmw.SharedScope for a test with one caller).
	// Default: none.
	Header http.Header

	// OtherHeader is another caller's Header, for the scope check: the
	// same key with these credentials must never get the first caller's
	// answer, and must run for that caller. Default: none, and the scope
	// check is skipped.
	OtherHeader http.Header

	// SameCallerHeader is the first caller's Header with another
	// credential, as a mobile client presents after refreshing its bearer
	// token, for the same-caller check: the same key with it must get the
	// first answer replayed and run nothing. A handler whose scope follows
	// the credential fails it: the middleware's default scope
	// (httpmw.DefaultScope, ginmw's too) hashes the Authorization header,
	// so set its Options.Scope to the authenticated caller (a user or
	// account ID). Give every header the requests need, as in Header.
	// Default: none, and the check is skipped.
	SameCallerHeader http.Header

	// SideEffects counts what the handler must do exactly once per
	// request: business records, charges, emails. It is called between
	// the checks, never while a request runs. Required.
	SideEffects func() int

	// SideEffectsPerRun is how far one run of the handler moves
	// SideEffects: new(0) for an outcome that makes none (a declined card,
	// 402, stored and replayed: no payment), 2 for a counter of charges and
	// emails together. Every check then wants that many per run, and none
	// for a replay. Default (nil): 1.
	SideEffectsPerRun *int

	// KeyHeader is the request header that carries the key. Default:
	// Idempotency-Key.
	KeyHeader string

	// OptionalKey says the handler runs requests without a key; the
	// missing-key check (400 without one) is then skipped. Default: false.
	OptionalKey bool

	// Parallel is how many copies of one request the concurrency check
	// sends at once, 2 to 1000. Default: 20.
	Parallel int

	// Timeout bounds each request, its 409 retries (after Retry-After)
	// included. Default: 10s.
	Timeout time.Duration

	// Crash, when set, enables the crash-resume check: it is called on the
	// first attempt's request of a fresh key, before it is served, to make
	// the handler crash part-way as a dying process would, typically by a
	// fault header the handler honours after its checkpoint by calling
	// runtime.Goexit() (or by panicking with http.ErrAbortHandler). The
	// crashed attempt must get no answer, and a retry must then complete
	// the request, with SideEffects up by one run's for the key.
	//
	// Under a recovery middleware, crash with runtime.Goexit(): no
	// recover() stops it, so the connection closes without an answer as
	// a dying process's does. gin.Recovery, which gin.Default() mounts,
	// recovers a panic with http.ErrAbortHandler and Gin then answers an
	// empty 200 (any other panic, 500), which the check reports, naming
	// gin.Recovery. Default: nil, and the check is skipped.
	Crash func(r *http.Request)

	// Redis, the Redis the handler's store writes to, enables the ttl
	// check: once the other checks are done, every key under Prefix must
	// have a TTL. Give the test a Redis of its own (NewStore does): every
	// key under Prefix is read. Default: nil, and the check is skipped.
	Redis redis.UniversalClient

	// Prefix is the store's redisstore.Options.Prefix, for the ttl check.
	// Default: "idem:".
	Prefix string

	// Report, when set, receives the idempotency guide's report for the
	// endpoint ("## Idempotency for POST /v1/payments", the template
	// idemkey verify --report fills), in Markdown, once every check ran.
	Report io.Writer
}

// words name Config's fields in the checks' messages.
var words = verify.Words{
	OptionalKey: "Config.OptionalKey",
	AltBody:     "Config.OtherBody",
	Count:       "Config.SideEffects",
	Fault:       "a way to lose an answer",
	Request:     "Config.Body and Config.Header",
	OtherHeader: "Config.OtherHeader",
	Crash:       "Config.Crash",
	Records:     "Config.Redis",
	SameCaller:  "Config.SameCallerHeader",
}

// maxRecords bounds the keys the ttl check reads.
const maxRecords = 100_000

// tester is what a run needs of a test: *testing.T (through testT), or a
// recorder in the kit's own tests.
type tester interface {
	Helper()
	Context() context.Context
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	// Run runs f as a subtest named name and reports whether it passed.
	Run(name string, f func(t tester)) bool
}

type testT struct{ *testing.T }

func (t testT) Run(name string, f func(t tester)) bool {
	return t.T.Run(name, func(t *testing.T) { f(testT{t}) })
}

// Run runs the verification list against h in process, each check as a
// subtest of t named after it: missing-key, malformed-key, concurrency,
// replay, mismatch, side-effects, lost-response, same-caller, scope,
// crash-resume and ttl. A failed check says what the handler did wrong; a check whose
// Config field is unset is skipped. Run fails t at once for a Config
// without Path, Body or SideEffects, and stops (failing t) if h gives no
// answer to its first request.
//
// Run sends many requests with fresh keys (a UUIDv7 per check) through
// h.ServeHTTP, as net/http's server would call it: on goroutines of their
// own, a recovered panic counted as a connection closed without an answer.
// h runs on whatever store it was built with; NewStore gives a fresh
// embedded one.
func Run(t *testing.T, h http.Handler, cfg Config) {
	t.Helper()
	run(testT{t}, h, cfg)
}

// run is Run on a tester.
func run(t tester, h http.Handler, cfg Config) {
	t.Helper()
	if h == nil {
		t.Fatalf("idemkeytest: the handler is nil")
		return
	}
	vc, err := cfg.verifyConfig()
	if err != nil {
		t.Fatalf("idemkeytest: %v", err)
		return
	}
	ctx := t.Context()
	count := cfg.SideEffects
	s, err := verify.Start(ctx, verify.NewHandlerTarget(h, func() int64 { return int64(count()) }), vc)
	if err != nil {
		t.Fatalf("idemkeytest: %v", err)
		return
	}
	endpoint := vc.Method + " " + vc.URL.String()
	for _, st := range s.Steps() {
		if st.Name == verify.StepFingerprint {
			if _, err := st.Run(ctx); err != nil {
				t.Fatalf("idemkeytest: %s: %v", endpoint, err)
				return
			}
			continue
		}
		ran := false
		var stepErr error
		t.Run(st.Name, func(t tester) {
			t.Helper()
			ran = true
			var c *verify.Check
			if c, stepErr = st.Run(ctx); stepErr != nil {
				t.Fatalf("idemkeytest: %s: %v", endpoint, stepErr)
				return
			}
			judge(t, endpoint, c)
		})
		if !ran && stepErr == nil { // filtered out by -run: the checks after it rely on what it saw
			if _, stepErr = st.Run(ctx); stepErr != nil {
				t.Fatalf("idemkeytest: %s, while running the %s check for the checks after it: %v", endpoint, st.Name, stepErr)
				return
			}
		}
		if stepErr != nil {
			return // the subtest said why
		}
	}
	rep, err := s.Finish(ctx)
	if err != nil {
		t.Fatalf("idemkeytest: %s: %v", endpoint, err)
		return
	}
	fp := rep.Observed.Fingerprint
	t.Logf("idemkeytest: %s: %d requests in %s; fingerprint (observed, judged by no check): body %s; query %s; JSON compared canonically: %s",
		endpoint, rep.Requests, rep.Elapsed.Round(time.Millisecond), fp.Body, fp.Query, fp.Canonical)
	if cfg.Report != nil {
		if err := rep.WriteMarkdown(cfg.Report); err != nil {
			t.Errorf("idemkeytest: writing the report: %v", err)
		}
	}
}

// judge reports c on t: an error listing what did not hold, a skip, or a
// log line.
func judge(t tester, endpoint string, c *verify.Check) {
	t.Helper()
	switch c.Result {
	case verify.ResultSkip:
		t.Skipf("idemkeytest: check %s skipped: %s", c.Name, c.Summary)
	case verify.ResultFail:
		var b strings.Builder
		fmt.Fprintf(&b, "idemkeytest: check %s failed for %s", c.Name, endpoint)
		if c.Key != "" {
			fmt.Fprintf(&b, " (key %s)", c.Key)
		}
		b.WriteString(":")
		for _, cl := range c.Clauses {
			if !cl.OK {
				fmt.Fprintf(&b, "\n\tnot so: %s: %s", cl.Clause, cl.Detail)
			}
		}
		for _, e := range c.Evidence {
			fmt.Fprintf(&b, "\n\t%s", e)
		}
		t.Errorf("%s", b.String())
	default:
		t.Logf("idemkeytest: %s: %s%s", c.Name, c.Summary, strings.Join(append([]string{""}, c.Evidence...), "\n\t"))
	}
}

// verifyConfig checks cfg and turns it into the shared checks' config.
func (cfg Config) verifyConfig() (verify.Config, error) {
	switch {
	case cfg.Path == "":
		return verify.Config{}, errors.New("Config.Path is required")
	case len(cfg.Body) == 0 && cfg.BodyFor == nil:
		return verify.Config{}, errors.New("Config.Body is required")
	case cfg.SideEffects == nil:
		return verify.Config{}, errors.New("Config.SideEffects is required: the handler's own count of what it must do once per request")
	case cfg.Parallel != 0 && (cfg.Parallel < 2 || cfg.Parallel > verify.MaxParallel):
		return verify.Config{}, fmt.Errorf("Config.Parallel must be 2 to %d, got %d", verify.MaxParallel, cfg.Parallel)
	case cfg.Timeout < 0:
		return verify.Config{}, fmt.Errorf("Config.Timeout must not be negative, got %s", cfg.Timeout)
	case cfg.SideEffectsPerRun != nil && *cfg.SideEffectsPerRun < 0:
		return verify.Config{}, fmt.Errorf("Config.SideEffectsPerRun must not be negative, got %d", *cfg.SideEffectsPerRun)
	}
	u, err := url.Parse(cfg.Path)
	if err != nil || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(u.Path, "/") {
		return verify.Config{}, fmt.Errorf("Config.Path must be a path starting with /, got %q", cfg.Path)
	}
	if cfg.Method == "" {
		cfg.Method = http.MethodPost
	}
	keyHeader := http.CanonicalHeaderKey(cfg.KeyHeader)
	if keyHeader == "" {
		keyHeader = "Idempotency-Key"
	}
	vc := verify.Config{
		Method: cfg.Method, URL: u, Body: cfg.Body, BodyFor: cfg.BodyFor, AltBody: cfg.OtherBody,
		KeyHeader: keyHeader, Parallel: cfg.Parallel, OptionalKey: cfg.OptionalKey, Timeout: cfg.Timeout,
		CountName: "SideEffects", Lose: "dropped by the kit", Words: words, Tool: "idemkeytest",
		Kit: true, Crash: cfg.Crash,
	}
	if cfg.SideEffectsPerRun != nil {
		n := int64(*cfg.SideEffectsPerRun)
		vc.PerRun = &n
	}
	hasBody := len(cfg.Body) > 0 || cfg.BodyFor != nil
	for _, h := range []struct {
		name string
		in   http.Header
		out  *http.Header
	}{{"Config.Header", cfg.Header, &vc.Header}, {"Config.OtherHeader", cfg.OtherHeader, &vc.OtherHeader},
		{"Config.SameCallerHeader", cfg.SameCallerHeader, &vc.SameCallerHeader}} {
		if h.in == nil && h.name != "Config.Header" {
			continue
		}
		hdr := h.in.Clone()
		if hdr == nil {
			hdr = http.Header{}
		}
		if _, ok := hdr[keyHeader]; ok {
			return verify.Config{}, fmt.Errorf("%s: %s is set by each check and cannot be given", h.name, keyHeader)
		}
		if hosts := hdr.Values("Host"); len(hosts) > 0 {
			if h.name == "Config.Header" {
				vc.Host = hosts[len(hosts)-1]
			}
			hdr.Del("Host")
		}
		if hasBody && hdr.Get("Content-Type") == "" {
			hdr.Set("Content-Type", "application/json")
		}
		*h.out = hdr
	}
	if vc.SameCallerHeader != nil && equalHeaders(vc.SameCallerHeader, vc.Header) {
		return verify.Config{}, errors.New("Config.SameCallerHeader is Config.Header: give the caller's other credential, e.g. a refreshed token")
	}
	if cfg.Redis != nil {
		prefix := cfg.Prefix
		if prefix == "" {
			prefix = "idem:"
		}
		vc.Records = records(cfg.Redis, prefix)
		vc.RecordsWhere = fmt.Sprintf("under %q", prefix)
	}
	return vc, nil
}

// equalHeaders reports whether a and b hold the same fields and values.
func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for name, va := range a {
		if !slices.Equal(va, b[name]) {
			return false
		}
	}
	return true
}
