package storm

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkey/idemkey/idemclient"
)

// attempt is the outcome of one HTTP attempt.
type attempt struct {
	status     int // 0 for transport errors
	replay     bool
	oversize   bool // a replay whose body is the response-too-large problem
	sum        [sha256.Size]byte
	size       int64
	snippet    [snippetLen]byte // the body's first bytes (snipLen of them)
	snipLen    uint8
	latency    time.Duration
	start      time.Duration // when it was sent, from the start of the run
	retryAfter string
	err        error
	timeout    bool // err: the client's own timeout cut it (--timeout, --attempt-timeout)
}

// body returns the first bytes of the attempt's body.
func (a *attempt) body() []byte { return a.snippet[:a.snipLen] }

// keyRun holds one key, what its duplicates send and the attempts made for
// it. What its requests send but the key is shared by all keys (runner.base),
// so that a key keeps no header map of its own: a load run keeps every key
// until its report.
type keyRun struct {
	key     string
	keyVal  [1]string // key, as the key header's values
	body    []byte
	extra   http.Header   // Config.HeaderFor's headers for this key, names canonical; nil without HeaderFor
	host    string        // the Host header's value, if one was given
	gate    chan struct{} // closed once all duplicates were picked up
	arrived atomic.Int64

	op *loadOp // load mode's figures; nil in the burst mode

	mu       sync.Mutex
	attempts []attempt  // the storm's
	probe    []attempt  // the late probe's
	first    [1]attempt // attempts' first array: most keys of a load run need one attempt
}

func (k *keyRun) record(a attempt, probe bool) {
	k.mu.Lock()
	if probe {
		k.probe = append(k.probe, a)
	} else {
		k.attempts = append(k.attempts, a)
	}
	k.mu.Unlock()
}

// runner is the state shared by the workers of one storm.
type runner struct {
	cfg         Config
	target      *url.URL
	client      *http.Client
	probeClient *http.Client
	start       time.Time // of the storm

	// transport and probeTransport are the clients' own transports, sent
	// to directly (client.Do would copy every request's header, for
	// redirects storm does not follow), or nil for Config.Client.
	transport, probeTransport http.RoundTripper
	errOp, errURL             string // for url.Error, as client.Do wraps errors

	base      http.Header // the headers every request carries, before the key's own
	keyHeader string      // Config.KeyHeader, canonical

	attempts     atomic.Int64 // HTTP attempts of the storm finished (responses + errors)
	completed    atomic.Int64 // logical (key, dup) requests finished
	inFlight     atomic.Int64
	retries      atomic.Int64 // the storm's
	probeRetries atomic.Int64
	probing      atomic.Bool
	probed       atomic.Int64 // keys probed
}

// Run executes the storm described by cfg: the count read (with CountURL),
// the storm, the late probe (unless NoProbe) and the second count read, and
// returns its report. It returns an error wrapping ErrInvalidConfig, and no
// report, when cfg is invalid, and an error wrapping ErrCount, and no
// report, when CountURL cannot be read before the storm. When ctx is
// cancelled before the storm completes, Run stops sending, waits for the
// requests in flight to be abandoned and returns the partial report, marked
// Interrupted, together with ctx.Err(); the probe and the second count read
// are skipped then. Run is safe for concurrent use with distinct Configs.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, target, err := normalize(cfg)
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, target: target, client: cfg.Client, probeClient: cfg.Client}
	if r.client == nil {
		tr := newTransport(cfg.connections())
		defer tr.CloseIdleConnections()
		r.client = newClient(tr)
		probe := newTransport(cfg.connections())
		probe.DisableKeepAlives = true // a fresh connection for every probe
		r.probeClient = newClient(probe)
		r.transport, r.probeTransport = tr, probe
		r.errOp, r.errURL = cfg.Method[:1]+strings.ToLower(cfg.Method[1:]), redactedURL(target)
	}
	r.base, r.keyHeader = r.baseHeader(), http.CanonicalHeaderKey(cfg.KeyHeader)
	var keys []*keyRun
	if !cfg.loadMode() {
		if keys, err = r.keys(); err != nil {
			return nil, err
		}
	} else if err := r.checkHeaderFor(); err != nil {
		return nil, err
	}

	var before int64
	if cfg.CountURL != "" {
		if before, err = r.readCount(ctx); err != nil {
			return nil, fmt.Errorf("%w: before the storm: %v", ErrCount, err)
		}
	}

	if cfg.OnStart != nil {
		cfg.OnStart()
	}
	start := time.Now()
	r.start = start
	var l *loader
	var stopProgress func()
	if cfg.loadMode() {
		l = r.newLoader(start)
		stopProgress = l.startProgress()
		keys = r.load(ctx, start, l)
	} else {
		stopProgress = r.startProgress(start)
		r.storm(ctx, keys)
	}
	elapsed := time.Since(start)
	interrupted := ctx.Err() != nil && (cfg.loadMode() || r.completed.Load() < int64(cfg.Keys*cfg.Dups))
	var probeElapsed time.Duration
	if !cfg.NoProbe && !interrupted {
		r.probing.Store(true)
		probeStart := time.Now()
		r.probe(ctx, keys)
		probeElapsed = time.Since(probeStart)
		interrupted = ctx.Err() != nil
	}
	stopProgress()

	rep := r.report(keys, elapsed)
	rep.Probe.Elapsed = probeElapsed
	if l != nil {
		rep.Load = l.report(keys, rep)
		if l.err != nil {
			rep.Error, interrupted = l.err.Error(), true
		}
	}
	if cfg.CountURL != "" {
		rep.Count = &Count{URL: cfg.CountURL, Field: cfg.CountField, Before: before}
		if !interrupted {
			rep.Count.After, err = r.readCount(ctx)
			rep.Count.Read = err == nil
			if err != nil {
				rep.Count.Error = err.Error()
			}
		}
	}
	if interrupted {
		rep.Interrupted = true
	}
	rep.Thresholds = cfg.thresholds(rep)
	if interrupted {
		return rep, ctx.Err()
	}
	return rep, nil
}

// baseHeader returns the headers every request carries, before the key's
// own.
func (r *runner) baseHeader() http.Header {
	base := r.cfg.Header.Clone()
	if base == nil {
		base = http.Header{}
	}
	if base.Get("User-Agent") == "" {
		base.Set("User-Agent", "idemkey-storm")
	}
	return base
}

// keys generates the burst storm's keys and what each sends.
func (r *runner) keys() ([]*keyRun, error) {
	keys := make([]*keyRun, r.cfg.Keys)
	for i := range keys {
		k := &keyRun{}
		if err := r.initKeyRun(k, i); err != nil {
			return nil, err
		}
		k.gate = make(chan struct{})
		keys[i] = k
	}
	return keys, nil
}

// checkHeaderFor checks Config.HeaderFor's headers for the first key, the
// check load mode can make before it starts.
func (r *runner) checkHeaderFor() error {
	if r.cfg.HeaderFor == nil {
		return nil
	}
	if err := checkHeader(r.cfg.HeaderFor("", 0)); err != nil {
		return fmt.Errorf("%w: headers of key 0: %v", ErrInvalidConfig, err)
	}
	return nil
}

// initKeyRun mints the i-th key into k and prepares what its requests
// send. It fails, wrapping ErrInvalidConfig, when Config.HeaderFor returns
// an invalid header.
func (r *runner) initKeyRun(k *keyRun, i int) error {
	cfg := r.cfg
	k.key = cfg.KeyPrefix + newKey()
	k.keyVal[0] = k.key
	k.attempts = k.first[:0]
	k.body = cfg.Body
	if cfg.BodyFor != nil {
		k.body = cfg.BodyFor(k.key, i)
	}
	k.host = r.base.Get("Host")
	if cfg.HeaderFor != nil {
		extra := cfg.HeaderFor(k.key, i)
		if err := checkHeader(extra); err != nil {
			return fmt.Errorf("%w: headers of key %d: %v", ErrInvalidConfig, i, err)
		}
		k.extra = make(http.Header, len(extra))
		for name, values := range extra {
			k.extra[http.CanonicalHeaderKey(name)] = values
		}
		if _, ok := k.extra["Host"]; ok {
			k.host = k.extra.Get("Host")
		}
	}
	return nil
}

// newClient returns a client on tr that does not follow redirects.
func newClient(tr http.RoundTripper) *http.Client {
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// newTransport returns a keep-alive transport sized for n workers, with at
// most n connections per host: an attempt that finds none idle waits for one
// rather than dialing past what the pool keeps (a dial that lost the race to
// a returning connection would outlive its attempt, and the pool would close
// the extra connection, leaving a socket in TIME-WAIT).
func newTransport(n int) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = n
	tr.MaxIdleConnsPerHost = n
	tr.MaxConnsPerHost = n
	tr.DisableKeepAlives = false
	return tr
}

// newKey returns a fresh key: a UUIDv7, as idemclient mints them.
func newKey() string { return idemclient.NewKey() }

// storm feeds the (key, duplicate) pairs to the workers and waits for them.
func (r *runner) storm(ctx context.Context, keys []*keyRun) {
	dups := r.cfg.Dups
	// Gating is only safe when all duplicates of a key can be held by
	// workers at the same time.
	gated := dups > 1 && dups <= r.cfg.Concurrency
	jobs := make(chan *keyRun) // unbuffered: keeps the key-major order strict
	go func() {
		defer close(jobs)
		for _, k := range keys {
			for range dups {
				select {
				case jobs <- k:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	var wg sync.WaitGroup
	for range r.cfg.Concurrency {
		wg.Go(func() {
			for k := range jobs {
				if ctx.Err() != nil {
					continue // drain
				}
				if gated {
					if k.arrived.Add(1) == int64(dups) {
						close(k.gate)
					}
					select {
					case <-k.gate:
					case <-ctx.Done():
						continue
					}
				}
				if r.request(ctx, k, false) {
					r.completed.Add(1)
				}
			}
		})
	}
	wg.Wait()
}

// probe sends one more duplicate for every key that has passed so far, now
// that the storm is over, from a client that does not reuse the storm's
// connections. A key that failed or got no final answer is not probed: the
// probe could not change its class, and a broken server would only run it
// once more.
func (r *runner) probe(ctx context.Context, keys []*keyRun) {
	jobs := make(chan *keyRun)
	go func() {
		defer close(jobs)
		for _, k := range keys {
			k.mu.Lock()
			passed := classifyKey(k.key, k.attempts, nil).class == classPassed
			k.mu.Unlock()
			if !passed {
				continue
			}
			select {
			case jobs <- k:
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range r.cfg.Concurrency {
		wg.Go(func() {
			for k := range jobs {
				if ctx.Err() == nil {
					r.request(ctx, k, true)
					r.probed.Add(1)
				}
			}
		})
	}
	wg.Wait()
}

// request performs one logical request for k and, with Config.Retry, asks
// again while the answer is not final (see retry.go), within
// Config.Timeout. It reports whether it ran to completion, i.e. ctx was not
// cancelled.
func (r *runner) request(ctx context.Context, k *keyRun, probe bool) bool {
	deadline := time.Now().Add(r.cfg.Timeout)
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for n := 0; ; n++ {
		a, ok := r.send(ctx, rctx, k, probe)
		if !ok {
			return false
		}
		k.record(a, probe)
		if !probe {
			r.attempts.Add(1)
		}
		if !r.cfg.Retry || !retryable(a.status, a.replay, a.err) || n >= r.cfg.MaxRetries {
			return true
		}
		wait := retryDelay(a.retryAfter, n, time.Now())
		if time.Until(deadline) <= wait {
			return true // no time left for another attempt
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
		if probe {
			r.probeRetries.Add(1)
		} else {
			r.retries.Add(1)
		}
	}
}
