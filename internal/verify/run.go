package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/idemkey/idemkey/idemclient"
)

// Defaults and bounds of a run.
const (
	// DefaultParallel is Config.Parallel's default.
	DefaultParallel = 20
	// MaxParallel bounds Config.Parallel.
	MaxParallel = 1000
	// DefaultTimeout is Config.Timeout's default.
	DefaultTimeout = 10 * time.Second
	// maxAttempts bounds the 409 retries of one request, whatever
	// Config.Timeout allows.
	maxAttempts = 100
	// maxBody bounds a response body the checks read.
	maxBody = 4 << 20
	// longKey is the length of the over-long key: over the 255 of the IETF
	// draft and of Stripe.
	longKey = 300
	// queryProbe is the parameter the query probe adds to the URL.
	queryProbe = "idemkey_verify=query"
)

// The names of the checks, as --json prints them and idemkeytest names its
// subtests.
const (
	CheckMissingKey   = "missing-key"
	CheckMalformedKey = "malformed-key"
	CheckConcurrency  = "concurrency"
	CheckReplay       = "replay"
	CheckMismatch     = "mismatch"
	CheckSideEffects  = "side-effects"
	CheckLostResponse = "lost-response"
	// CheckSameCaller runs with Config.Kit, or with Config.SameCallerHeader.
	CheckSameCaller = "same-caller"
	// The checks of Config.Kit only.
	CheckScope       = "scope"
	CheckCrashResume = "crash-resume"
	CheckTTL         = "ttl"
)

// StepFingerprint names the step of the fingerprint probes, which judge
// nothing and add no check.
const StepFingerprint = "fingerprint"

// The results of a check.
const (
	ResultOK   = "ok"
	ResultFail = "fail"
	ResultSkip = "skip"
)

// ErrUnreachable ends a run whose first request got no HTTP response.
var ErrUnreachable = errors.New("unreachable")

// Config is one run of the checks. A zero field takes its default.
type Config struct {
	// Method is every request's. Default: POST.
	Method string
	// URL is the endpoint: absolute for a URL target; its path and query
	// for a handler target. Required.
	URL *url.URL
	// Body is every request's body, unless BodyFor is set.
	Body []byte
	// BodyFor, when set, gives the body for each key instead of Body (""
	// for the request without a key).
	BodyFor func(key string) []byte
	// AltBody is the body of the mismatch check. Default: the key's body
	// with one JSON value changed.
	AltBody []byte
	// Header is sent on every request (the caller's credentials).
	Header http.Header
	// Host, when set, is every request's Host.
	Host string
	// KeyHeader carries the key. Default: Idempotency-Key.
	KeyHeader string
	// Parallel is how many copies the concurrency check sends at once.
	// Default: DefaultParallel.
	Parallel int
	// OptionalKey skips the missing-key check: the endpoint runs requests
	// without a key.
	OptionalKey bool
	// Timeout bounds each request, its 409 retries included. Default:
	// DefaultTimeout.
	Timeout time.Duration
	// CountName names the side-effect counter in the messages.
	CountName string
	// Lose says how the target loses an answer, as the lost-response
	// check's clause puts it ("with X-Demo-Fault: drop-response"); ""
	// skips that check.
	Lose string
	// LoseHint is what to look at when an answer the target was to lose
	// came back.
	LoseHint string
	// Words name the run's knobs in the messages.
	Words Words
	// Tool names what ran the checks, in the report. Default: "idemkey
	// verify".
	Tool string
	// PerRun is how far one run of the handler moves the counter: 1, or 0
	// for an outcome with no side effect (a declined card), or more for a
	// counter of several things. Default (nil): 1.
	PerRun *int64
	// SameCallerHeader is the first caller's Header with another
	// credential (a refreshed token), for the same-caller check: the
	// concurrency check's key with it must get the replay. Nil skips the
	// check, and without Kit leaves it out of the report.
	SameCallerHeader http.Header

	// Kit adds idemkeytest's checks after lost-response (scope,
	// crash-resume and ttl, each skipped without the field it needs), and
	// makes every check that sends keyed requests also judge how far the
	// counter moved during it.
	Kit bool
	// OtherHeader is another caller's Header, for the scope check.
	OtherHeader http.Header
	// Crash, for the crash-resume check, marks the first attempt's request
	// so that the handler crashes after (some of) its side effect.
	Crash func(*http.Request)
	// Records lists the store's keys, for the ttl check.
	Records func(ctx context.Context) ([]Record, error)
	// RecordsWhere says where Records looks ("under \"idem:\""), for the
	// ttl check's messages.
	RecordsWhere string
}

// Words name the knobs of a run in its messages: flags for idemkey verify,
// Config fields for idemkeytest.
type Words struct {
	OptionalKey string // skips the missing-key check
	AltBody     string // the mismatch check's body
	Count       string // the side-effect counter
	Fault       string // what loses an answer
	Request     string // the body and headers of the requests
	OtherHeader string // another caller's credentials
	SameCaller  string // the same caller's other credential
	Crash       string // the crash hook
	Records     string // where the records are read
}

// Record is one of the store's keys, as the ttl check sees it.
type Record struct {
	Key string
	// TTL is the key's time to live; negative when it has none.
	TTL time.Duration
}

func (cfg Config) withDefaults() Config {
	if cfg.Method == "" {
		cfg.Method = http.MethodPost
	}
	if cfg.KeyHeader == "" {
		cfg.KeyHeader = idemclient.HeaderKey
	}
	cfg.KeyHeader = http.CanonicalHeaderKey(cfg.KeyHeader)
	if cfg.Parallel <= 0 {
		cfg.Parallel = DefaultParallel
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Tool == "" {
		cfg.Tool = "idemkey verify"
	}
	if cfg.Header == nil {
		cfg.Header = http.Header{}
	}
	if cfg.PerRun == nil {
		one := int64(1)
		cfg.PerRun = &one
	}
	return cfg
}

// Session is one run of the checks against a target, step by step: Steps
// in order, then Finish. Run does all three.
type Session struct {
	t      Target
	cfg    Config
	policy idemclient.Policy
	rep    *Report
	cnt    counts
	// answered is set once a request got an answer or was sent after one:
	// until then a transport error means the endpoint is unreachable.
	answered bool
	key      string    // the concurrency check's key
	orig     *exchange // the answer the later checks compare with

	mu   sync.Mutex
	sent int // requests sent, for the report
}

// Run runs every check against t and returns the report. It returns an
// error, and no report, when the endpoint or the counter cannot be reached
// at the start, the counter cannot be read later, or ctx ends.
func Run(ctx context.Context, t Target, cfg Config) (*Report, error) {
	s, err := Start(ctx, t, cfg)
	if err != nil {
		return nil, err
	}
	for _, st := range s.Steps() {
		if _, err := st.Run(ctx); err != nil {
			return nil, err
		}
	}
	return s.Finish(ctx)
}

// Start begins a run: it reads the counter, if there is one.
func Start(ctx context.Context, t Target, cfg Config) (*Session, error) {
	cfg = cfg.withDefaults()
	if cfg.URL == nil {
		return nil, errors.New("verify: Config.URL is required")
	}
	s := &Session{t: t, cfg: cfg, policy: idemclient.Policy{MaxRetryAfter: cfg.Timeout}}
	s.rep = &Report{
		Method: cfg.Method, URL: cfg.URL.String(), KeyHeader: cfg.KeyHeader,
		Parallel: cfg.Parallel, Started: time.Now().UTC(), Tool: cfg.Tool,
		optionalKey: cfg.Words.OptionalKey,
	}
	n, on, err := t.Count(ctx)
	if err != nil {
		return nil, err
	}
	if on {
		s.cnt = counts{on: true, start: n, last: n}
		s.rep.Count = &CountReport{Field: cfg.CountName, Before: n}
		if u, ok := t.(*URLTarget); ok {
			s.rep.Count.URL = u.countURL
		}
	}
	return s, nil
}

// Step is one step of a run: one check, or the fingerprint probes.
type Step struct {
	// Name is the check's (Check*), or StepFingerprint.
	Name string
	// Run runs the step and returns its check (nil for the probes). Its
	// error ends the run: the endpoint was unreachable, the counter could
	// not be read, or ctx ended.
	Run func(ctx context.Context) (*Check, error)
}

// Steps returns the run's steps, to be run once each, in order: a step
// relies on what the ones before it saw.
func (s *Session) Steps() []Step {
	steps := []Step{
		{CheckMissingKey, s.missingKey},
		{CheckMalformedKey, s.malformedKey},
		{CheckConcurrency, s.concurrency},
		{CheckReplay, s.replay},
		{CheckMismatch, s.mismatch},
		{CheckSideEffects, s.sideEffects},
		{StepFingerprint, s.probes},
		{CheckLostResponse, s.lostResponse},
	}
	if s.cfg.Kit || s.cfg.SameCallerHeader != nil {
		steps = append(steps, Step{CheckSameCaller, s.sameCaller})
	}
	if s.cfg.Kit {
		steps = append(steps, Step{CheckScope, s.scope}, Step{CheckCrashResume, s.crashResume}, Step{CheckTTL, s.ttl})
	}
	return steps
}

// Finish ends the run and returns its report, with the verdict.
func (s *Session) Finish(ctx context.Context) (*Report, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", err)
	}
	rep := s.rep
	if rep.Count != nil {
		rep.Count.After, rep.Count.Steps = s.cnt.last, s.cnt.steps
	}
	rep.Elapsed = time.Since(rep.Started)
	s.mu.Lock()
	rep.Requests = s.sent
	s.mu.Unlock()
	rep.Verdict = VerdictPass
	for _, c := range rep.Checks {
		if c.Result == ResultFail {
			rep.Verdict = VerdictFail
		}
	}
	return rep, nil
}

// bodyFor is the body of the requests with key.
func (s *Session) bodyFor(key string) []byte {
	if s.cfg.BodyFor != nil {
		return s.cfg.BodyFor(key)
	}
	return s.cfg.Body
}

// send sends one request, bounded by Config.Timeout, and reads the answer.
func (s *Session) send(ctx context.Context, r request) (e exchange) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	target := r.url
	if target == "" {
		target = s.cfg.URL.String()
	}
	e.sentAt = time.Now()
	defer func() { e.doneAt = time.Now() }() // the result e, after the body is read
	req, err := http.NewRequestWithContext(ctx, s.cfg.Method, target, bytes.NewReader(r.body))
	if err != nil {
		e.err = err
		return e
	}
	header := s.cfg.Header
	if r.header != nil {
		header = r.header
	}
	for name, values := range header {
		req.Header[name] = slices.Clone(values)
	}
	if s.cfg.Host != "" {
		req.Host = s.cfg.Host
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "idemkey-verify")
	}
	if !r.noKey {
		req.Header.Set(s.cfg.KeyHeader, r.key)
	}
	if r.crash {
		s.cfg.Crash(req)
	}
	s.mu.Lock()
	s.sent++
	s.mu.Unlock()
	resp, err := s.t.Send(req, r.lose)
	if err != nil {
		e.err = unwrapURLError(err)
		return e
	}
	defer resp.Body.Close()
	e.status, e.header = resp.StatusCode, resp.Header
	e.body, err = io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	switch {
	case err != nil:
		e.err = fmt.Errorf("%d, then reading the body: %w", resp.StatusCode, unwrapURLError(err))
	case len(e.body) > maxBody:
		e.err = fmt.Errorf("%d with a body over %d bytes", resp.StatusCode, maxBody)
	}
	return e
}

// unwrapURLError drops the "Post "http://…": " prefix: the URL is in the
// report's heading.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// reachable turns the first request's transport error into ErrUnreachable:
// nothing was checked.
func (s *Session) reachable(e exchange) error {
	if !s.answered && e.err != nil {
		return fmt.Errorf("%w: %s %s: %v", ErrUnreachable, s.cfg.Method, s.cfg.URL, e.err)
	}
	s.answered = true
	return nil
}

// untilFinal sends r, and sends it again after each 409 (not a replay)
// once Retry-After has passed (backoff without one), until another answer,
// a transport error, Config.Timeout or maxAttempts. It returns every
// attempt; the last is final unless it is a 409.
func (s *Session) untilFinal(ctx context.Context, r request) []exchange {
	deadline := time.Now().Add(s.cfg.Timeout)
	var attempts []exchange
	for n := 1; ; n++ {
		e := s.send(ctx, r)
		attempts = append(attempts, e)
		if !e.inProgress() || n >= maxAttempts {
			return attempts
		}
		d := s.policy.Delay(n, e.header.Get("Retry-After"), time.Now())
		if time.Now().Add(d).After(deadline) {
			return attempts
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return attempts
		case <-t.C:
		}
	}
}

// counts follows the side-effect counter through the run.
type counts struct {
	on    bool
	start int64
	last  int64
	steps []CountStep
}

// CountStep is how much the counter moved during one step of the run.
type CountStep struct {
	Step  string `json:"step"`
	Delta int64  `json:"delta"`
}

// mark reads the counter after step and records how much it moved.
func (s *Session) mark(ctx context.Context, step string) (int64, error) {
	if !s.cnt.on {
		return 0, nil
	}
	n, _, err := s.t.Count(ctx)
	if err != nil {
		return 0, err
	}
	d := n - s.cnt.last
	s.cnt.steps = append(s.cnt.steps, CountStep{Step: step, Delta: d})
	s.cnt.last = n
	return d, nil
}

// judgeCount adds, with Config.Kit and a counter, the clause that the
// counter moved by what runs (0 or 1) runs of the handler make
// (Config.PerRun each) during c.
func (s *Session) judgeCount(c *Check, moved, runs int64) {
	if !s.cfg.Kit || !s.cnt.on {
		return
	}
	want := runs * *s.cfg.PerRun
	c.clause(effects(want), moved == want, fmt.Sprintf("%s %+d", s.cfg.CountName, moved))
}

// effects names n side effects in a clause: "no side effect", "exactly one
// side effect", "exactly 2 side effects".
func effects(n int64) string {
	switch n {
	case 0:
		return "no side effect"
	case 1:
		return "exactly one side effect"
	}
	return fmt.Sprintf("exactly %d side effects", n)
}
