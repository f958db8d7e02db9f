package storm

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemkey/idemkey/idemclient"
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

	defaultRate        = 100
	defaultDuration    = 10 * time.Second
	defaultMaxInFlight = 1000
	defaultRetries     = 3
	// maxOperations bounds Rate*Duration.
	maxOperations = 2_000_000

	// maxRequests bounds Keys*Dups.
	maxRequests = 100_000_000
	// snippetLen is how many leading body bytes are kept for failure reasons.
	snippetLen = 48
	// progressInterval is how often the burst mode's progress line is
	// rewritten; load mode's is once a second.
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
	// that is not final (409, 408, 425, 429, 503, and 500, 502, 504 as
	// idemclient retries them, without the replay header, or a transport
	// error), after its Retry-After, until a final
	// answer arrives or Timeout runs out. The late probe retries the same
	// way. Load mode has its own retries (Retries, Policy) and always
	// retries its late probe like this.
	Retry bool
	// MaxRetries bounds the retries of one request when Retry is set, so a
	// server answering "Retry-After: 0" cannot spin a worker; 0 means 100.
	MaxRetries int
	// NoProbe skips the late probe (see the package documentation).
	NoProbe bool
	// CountURL, when set, is read with GET before and after the storm; the
	// JSON numbers at CountField and Counts in its answer count the side
	// effects the server made. The storm fails unless each grew by its
	// Want times the keys whose final answer was a 2xx or 3xx, plus at
	// most Want per other key sent (a 4xx, or no final answer: its answers
	// were lost, not necessarily its run);
	// a count that grew by exactly the least proves that the unproven keys
	// ran once. The request carries no storm headers.
	CountURL string
	// CountField names the number in CountURL's JSON object; dots reach
	// into nested objects ("stats.charges"). Each operation must make one
	// side effect on it. With CountURL, CountField or Counts is required.
	CountField string
	// Counts are more numbers read from CountURL, after CountField (if
	// set), each with the side effects one operation makes on it (Want: 0
	// for an operation that must make none). Their names must differ.
	Counts []CountSpec
	// MaxFailures bounds how many keys Report.Failures and
	// Report.Inconclusive list each; 0 means 10, a negative value lists
	// all of them.
	MaxFailures int
	// KeyPrefix is prepended to every generated key, e.g. to find the
	// storm's keys in server logs. It must be visible ASCII without
	// quotes, backslashes or commas: the keys are sent as bare tokens.
	KeyPrefix string
	// Client is the HTTP client to use. When nil, Run builds a client whose
	// transport opens at most Concurrency keep-alive connections to the
	// host (MaxInFlight in load mode) and that does not follow redirects,
	// sends to that transport directly, and closes it at the end; the
	// late probe then uses a transport of its own that opens a fresh
	// connection for every request. A Client given here serves the probe
	// too.
	Client *http.Client
	// Progress, when non-nil, receives a progress line rewritten in place
	// with carriage returns (every 200ms in the burst mode, every second in
	// load mode), cleared when the storm ends. Only point it at a terminal.
	Progress io.Writer

	// Rate, when positive, selects load mode (so does Duration): Rate
	// operations are started per second, on a fixed schedule that does not
	// wait for the server (open loop). Each operation has a key of its own
	// and is sent Dups times at once. Keys and Concurrency are the burst
	// mode's and are ignored. 0 in load mode means 100, or 0 with Stages
	// (the rate their ramp starts from).
	Rate float64
	// Duration, when positive, selects load mode: operations are scheduled
	// for Duration, Rate*Duration of them (rounded up), and the run lasts
	// until the last one has ended. 0 in load mode means 10s, or the sum of
	// the Stages.
	Duration time.Duration
	// Stages, when given, select load mode and shape its arrival rate: it
	// ramps linearly from Rate (0 by default with stages) to each stage's
	// rate over the stage's duration (see Stage), and the schedule lasts
	// the sum of the stages, which Duration must then be 0 or equal. At
	// most 1000 stages.
	Stages []Stage
	// Metrics, when non-nil, receives load mode's live figures as the
	// storm goes (see Metrics; --metrics-addr serves them).
	Metrics *Metrics
	// MaxInFlight bounds the attempts in flight at once in load mode. An
	// operation whose first attempt has to wait for a slot is late; its
	// latency still counts from its scheduled start. 0 means 1000.
	MaxInFlight int
	// AttemptTimeout bounds one attempt in load mode: the client gives up
	// on it and retries with the same key and body. Timeout bounds the
	// whole operation, its attempts and waits together. 0: no bound but
	// Timeout.
	AttemptTimeout time.Duration
	// Retries bounds the retries of each copy of an operation in load mode;
	// 0 means 3, a negative value none. Which answers are retried, and
	// when, is Policy's.
	Retries int
	// Policy is the retry policy of load mode: Policy.Retryable says which
	// answers are retried, Policy.Delay how long to wait (Retry-After,
	// capped at Policy.MaxRetryAfter, else exponential backoff with full
	// jitter between BaseDelay and MaxDelay). The zero value is
	// idemclient's default policy.
	Policy idemclient.Policy

	// MaxP99 is a threshold of load mode: the run breaks it when the p99 of
	// the operations' latency is above it. 0: no threshold.
	MaxP99 time.Duration
	// MaxAmplification is a threshold of load mode: attempts per operation
	// started. 0: no threshold.
	MaxAmplification float64
	// OnStart, if set, is called once when the storm starts sending (after
	// the side-effect count was read): a clock for what should happen
	// during the run, such as a slow window in a demo. With several
	// RetryPolicies, once per arm, after the arm's count read.
	OnStart func()

	// MinGoodput is a threshold of load mode: operations completed with a
	// final answer per second of the schedule. 0: no threshold.
	MinGoodput float64
	// MinExactlyOnceGoodput is a threshold of load mode: operations
	// completed per second whose key passed. 0: no threshold.
	MinExactlyOnceGoodput float64
	// MaxPeakAmplification is a threshold of load mode: the highest
	// amplification of one second of the timeline. 0: no threshold.
	MaxPeakAmplification float64

	// Settle is how long the storm waits after its last attempt (the late
	// probe's included) before reading the counts after it (CountURL), so
	// that executions still running on the server behind the client's
	// timeouts are counted. It is waited only when an attempt lost its
	// answer (a timeout or a transport error): otherwise every execution
	// had answered. 0 means the attempt timeout (AttemptTimeout in load
	// mode when set, else Timeout); a negative value, none.
	Settle time.Duration

	// History, when non-nil, receives the storm's history as JSON Lines
	// (see History and storm/README.md), streamed as the storm goes
	// through a buffer of fixed size. Run writes to it from several
	// goroutines, one write at a time, and does not close it.
	History io.Writer

	// Incident: see incident.go and "Reproduce an incident" in
	// storm/README.md.

	// Proxies are HTTP fault hops that storm runs while it storms, each as
	// --proxy writes it: NAME=LISTEN,UPSTREAM (LISTEN on loopback). The
	// service under test calls its dependency through LISTEN.
	Proxies []string
	// TCPProxies are TCP fault hops, each as --tcp-proxy writes it:
	// NAME=LISTEN,ADDR.
	TCPProxies []string
	// Faults are the hops' windows, each as --fault writes it:
	// "NAME at=D for=D [latency=D[..D]] [errors=P%[:STATUS]] [down]", D
	// from the run's start. In load mode a window must end by Duration.
	Faults []string
	// At are shell commands run at a time of the run, each as --at
	// writes it: D=COMMAND. In load mode D must be before Duration.
	At []string
	// RetryPolicies names load mode's retry policies, as idemclient's
	// NewRetryPolicy does (backoff, naive, budget, token-bucket,
	// adaptive): with more than one, each is an arm that runs the same
	// schedule (arrivals, faults, events) in turn on fresh keys, and the
	// Report has one Report per arm in Arms. Empty means backoff.
	RetryPolicies []string
	// MaxRecovery is a threshold of load mode with Faults or At: the time
	// from the end of the last trigger until the run recovered
	// (Report.Recovery); a run that did not recover breaks it. 0: no
	// threshold.
	MaxRecovery time.Duration
	// HistoryFor, with several RetryPolicies, gives the writer of each
	// arm's history (History takes one arm's only); nil writes none.
	HistoryFor func(policy string) io.Writer

	// OnHop, if set, is called for each hop once it listens, before
	// anything is sent, with its name and address (host:port): with a
	// LISTEN port 0, how the service under test learns where to call.
	OnHop func(name, addr string)

	arm armHooks // set by Run for each arm
}

// The modes, as Settings.Mode and the JSON report's "mode" name them.
const (
	modeBurst = "burst"
	modeLoad  = "load"
)

// counts returns the side-effect counts to read: CountField, then Counts.
func (cfg Config) counts() []CountSpec {
	var out []CountSpec
	if cfg.CountField != "" {
		out = append(out, CountSpec{Field: cfg.CountField, Want: 1})
	}
	return append(out, cfg.Counts...)
}

// settings returns what a history keeps of cfg, which is normalized.
func (cfg Config) settings() Settings {
	s := Settings{
		Mode: modeBurst, KeyHeader: cfg.KeyHeader, Keys: cfg.Keys, Dups: cfg.Dups, Concurrency: cfg.Concurrency,
		Timeout: cfg.Timeout, Retry: cfg.Retry, MaxRetries: cfg.MaxRetries, Probe: !cfg.NoProbe,
		CountURL: redactURL(cfg.CountURL), Counts: cfg.counts(), MaxFailures: cfg.MaxFailures,
	}
	if len(s.Counts) > 0 {
		s.Settle = cfg.Settle
	}
	if cfg.loadMode() {
		s.Mode, s.Rate, s.Duration, s.MaxInFlight, s.AttemptTimeout = modeLoad, cfg.Rate, cfg.Duration, cfg.MaxInFlight, cfg.AttemptTimeout
		s.Stages = cfg.Stages
		s.Retries, s.BaseDelay, s.MaxDelay = cfg.Retries, cfg.Policy.BaseDelay, cfg.Policy.MaxDelay
		s.MaxP99, s.MaxAmplification, s.MinGoodput = cfg.MaxP99, cfg.MaxAmplification, cfg.MinGoodput
		s.MinExactlyOnceGoodput, s.MaxPeakAmplification = cfg.MinExactlyOnceGoodput, cfg.MaxPeakAmplification
		s.Policy, s.MaxRecovery = cfg.arm.policy, cfg.MaxRecovery
	}
	return s
}

// loadMode reports whether cfg selects load mode.
func (cfg Config) loadMode() bool { return cfg.Rate > 0 || cfg.Duration > 0 || len(cfg.Stages) > 0 }

// operations returns the number of operations load mode schedules.
func (cfg Config) operations() int { return cfg.schedule().total() }

// schedule returns load mode's arrival schedule.
func (cfg Config) schedule() schedule { return newSchedule(cfg.Rate, cfg.Duration, cfg.Stages) }

// connections returns the keep-alive connections the storm's transport
// keeps: one per worker, or per attempt in flight.
func (cfg Config) connections() int {
	if cfg.loadMode() {
		return cfg.MaxInFlight
	}
	return cfg.Concurrency
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
	if cfg.loadMode() || cfg.Rate < 0 || cfg.Duration < 0 {
		if err := normalizeLoad(&cfg); err != nil {
			return bad("%v", err)
		}
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
	switch {
	case cfg.Settle < 0:
		cfg.Settle = 0
	case cfg.Settle == 0 && cfg.AttemptTimeout > 0:
		cfg.Settle = cfg.AttemptTimeout
	case cfg.Settle == 0:
		cfg.Settle = cfg.Timeout
	}
	if err := checkHeader(cfg.Header); err != nil {
		return bad("%v", err)
	}
	for i := 0; i < len(cfg.KeyPrefix); i++ {
		if c := cfg.KeyPrefix[i]; c <= ' ' || c > '~' || c == ',' || c == '"' || c == '\\' {
			return bad("key prefix %q: want visible ASCII without quotes, backslashes or commas (the key is sent as a bare token)", cfg.KeyPrefix)
		}
	}
	if cfg.CountURL != "" || len(cfg.counts()) > 0 {
		if _, err := httpflag.ParseURL(cfg.CountURL); err != nil {
			return bad("count URL: %v", err)
		}
		if len(cfg.counts()) == 0 {
			return bad("count field is required with a count URL")
		}
		seen := map[string]bool{}
		for _, c := range cfg.counts() {
			switch {
			case c.Field == "":
				return bad("a count without a field name")
			case c.Want < 0:
				return bad("count %s: want must not be negative", c.Field)
			case seen[c.Field]:
				return bad("count %s given twice", c.Field)
			}
			seen[c.Field] = true
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

// normalizeLoad applies load mode's defaults and checks its settings.
func normalizeLoad(cfg *Config) error {
	switch {
	case cfg.Rate < 0 || math.IsNaN(cfg.Rate) || math.IsInf(cfg.Rate, 0):
		return fmt.Errorf("rate must be a positive number")
	case cfg.Duration < 0:
		return fmt.Errorf("duration must not be negative")
	case cfg.MaxInFlight < 0:
		return fmt.Errorf("max in flight must not be negative")
	case cfg.AttemptTimeout < 0:
		return fmt.Errorf("attempt timeout must not be negative")
	case cfg.Policy.BaseDelay < 0 || cfg.Policy.MaxDelay < 0 || cfg.Policy.MaxRetryAfter < 0:
		return fmt.Errorf("backoff delays must not be negative")
	case cfg.MaxP99 < 0 || cfg.MaxAmplification < 0 || cfg.MinGoodput < 0 || cfg.MinExactlyOnceGoodput < 0 ||
		cfg.MaxPeakAmplification < 0 || cfg.MaxRecovery < 0 || math.IsNaN(cfg.MaxAmplification) || math.IsNaN(cfg.MinGoodput) ||
		math.IsNaN(cfg.MinExactlyOnceGoodput) || math.IsNaN(cfg.MaxPeakAmplification):
		return fmt.Errorf("thresholds must not be negative")
	}
	if len(cfg.Stages) > 0 {
		if err := checkStages(cfg); err != nil {
			return err
		}
		cfg.Duration, _ = stagesDuration(cfg.Stages)
	}
	if cfg.Rate == 0 && len(cfg.Stages) == 0 {
		cfg.Rate = defaultRate
	}
	if cfg.Duration == 0 {
		cfg.Duration = defaultDuration
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = defaultMaxInFlight
	}
	switch {
	case cfg.Retries == 0:
		cfg.Retries = defaultRetries
	case cfg.Retries < 0:
		cfg.Retries = 0
	}
	if cfg.Dups == 0 {
		cfg.Dups = 1
	}
	if n := cfg.schedule().arrivals(); n > maxOperations {
		return fmt.Errorf("rate x duration must not exceed %d operations", maxOperations)
	}
	if cfg.operations() < 1 {
		return fmt.Errorf("rate x duration must make at least one operation")
	}
	if int64(cfg.operations())*int64(cfg.Dups) > maxRequests {
		return fmt.Errorf("operations x dups must not exceed %d", maxRequests)
	}
	cfg.Keys = cfg.operations()
	cfg.Concurrency = min(cfg.MaxInFlight, defaultConcurrency) // the late probe's workers
	cfg.Retry = true                                           // the late probe's retries
	return nil
}
