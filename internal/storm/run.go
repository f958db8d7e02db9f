package storm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"mime"
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
	snippet    []byte
	latency    time.Duration
	start      time.Duration // when it was sent, from the start of the run
	retryAfter string
	err        error
	timeout    bool // err: the client's own timeout cut it (--timeout, --attempt-timeout)
}

// keyRun holds one key, what its duplicates send and the attempts made for
// it.
type keyRun struct {
	key     string
	body    []byte
	header  http.Header // the request headers, the key header included
	host    string
	gate    chan struct{} // closed once all duplicates were picked up
	arrived atomic.Int64

	op *loadOp // load mode's figures; nil in the burst mode

	mu       sync.Mutex
	attempts []attempt // the storm's
	probe    []attempt // the late probe's
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
	}
	base := r.baseHeader()
	var keys []*keyRun
	if !cfg.loadMode() {
		if keys, err = r.keys(base); err != nil {
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
		keys = r.load(ctx, base, start, l)
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
func (r *runner) keys(base http.Header) ([]*keyRun, error) {
	keys := make([]*keyRun, r.cfg.Keys)
	for i := range keys {
		k, err := r.newKeyRun(base, i)
		if err != nil {
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

// newKeyRun mints the i-th key and builds what its requests send. It
// fails, wrapping ErrInvalidConfig, when Config.HeaderFor returns an
// invalid header.
func (r *runner) newKeyRun(base http.Header, i int) (*keyRun, error) {
	cfg := r.cfg
	k := &keyRun{key: cfg.KeyPrefix + newKey()}
	k.body = cfg.Body
	if cfg.BodyFor != nil {
		k.body = cfg.BodyFor(k.key, i)
	}
	h := base.Clone()
	if cfg.HeaderFor != nil {
		extra := cfg.HeaderFor(k.key, i)
		if err := checkHeader(extra); err != nil {
			return nil, fmt.Errorf("%w: headers of key %d: %v", ErrInvalidConfig, i, err)
		}
		for name, values := range extra {
			h[http.CanonicalHeaderKey(name)] = values
		}
	}
	if len(k.body) > 0 && h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	k.host = h.Get("Host")
	h.Del("Host")
	h.Set(cfg.KeyHeader, k.key)
	k.header = h
	return k, nil
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

// send sends one HTTP request for k, bounded by rctx. ok is false when ctx
// (the storm's) was cancelled, in which case the attempt is not recorded.
func (r *runner) send(ctx, rctx context.Context, k *keyRun, probe bool) (a attempt, ok bool) {
	req := r.newRequest(rctx, k)
	client := r.client
	if probe {
		client = r.probeClient
	}

	r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	start := time.Now()
	a.start = start.Sub(r.start)
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return attempt{}, false
		}
		a.err, a.latency, a.timeout = err, time.Since(start), rctx.Err() != nil
		return a, true
	}
	a.status = resp.StatusCode
	a.replay = strings.EqualFold(strings.TrimSpace(resp.Header.Get(headerReplayed)), "true")
	a.retryAfter = resp.Header.Get("Retry-After")
	s := sinks.Get().(*sink)
	s.reset(a.replay && isProblem(resp.Header.Get("Content-Type")))
	a.size, err = io.CopyBuffer(s, resp.Body, s.buf)
	_ = resp.Body.Close()
	a.latency = time.Since(start)
	if err != nil {
		sinks.Put(s)
		if ctx.Err() != nil {
			return attempt{}, false
		}
		a.err, a.timeout = fmt.Errorf("reading %d response body: %w", resp.StatusCode, err), rctx.Err() != nil
		return a, true
	}
	s.h.Sum(a.sum[:0])
	if len(s.snip) > 0 {
		a.snippet = append([]byte(nil), s.snip...)
	}
	a.oversize = s.problem != nil && isTooLarge(s.problem, a.status)
	sinks.Put(s)
	return a, true
}

// newRequest builds an attempt's request for k, as http.NewRequest would
// but without parsing the URL again: the URL and the header are shared by
// the attempts, read-only (net/http modifies neither).
func (r *runner) newRequest(ctx context.Context, k *keyRun) *http.Request {
	req := &http.Request{
		Method: r.cfg.Method, URL: r.target, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: k.header, Host: r.target.Host, Body: http.NoBody, GetBody: noBody,
	}
	if k.host != "" {
		req.Host = k.host
	}
	if n := len(k.body); n > 0 {
		body := k.body
		req.ContentLength = int64(n)
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	return req.WithContext(ctx)
}

func noBody() (io.ReadCloser, error) { return http.NoBody, nil }

// sink takes in a response body: its SHA-256, its first snippetLen bytes
// and, for a problem document, up to maxProblemBytes+1 of it. Sinks are
// pooled, with their copy buffers, to keep the generator's work per attempt
// small.
type sink struct {
	h       hash.Hash
	buf     []byte
	snip    []byte
	problem []byte
	keep    bool // keep the problem document
}

var sinks = sync.Pool{New: func() any {
	return &sink{h: sha256.New(), buf: make([]byte, 16<<10), snip: make([]byte, 0, snippetLen)}
}}

func (s *sink) reset(problem bool) {
	s.h.Reset()
	s.snip = s.snip[:0]
	s.problem = s.problem[:0]
	s.keep = problem
	if !problem {
		s.problem = nil
	}
}

func (s *sink) Write(p []byte) (int, error) {
	s.h.Write(p)
	if room := snippetLen - len(s.snip); room > 0 {
		s.snip = append(s.snip, p[:min(room, len(p))]...)
	}
	if s.keep {
		if room := maxProblemBytes + 1 - len(s.problem); room > 0 {
			s.problem = append(s.problem, p[:min(room, len(p))]...)
		}
	}
	return len(p), nil
}

// isProblem reports whether a Content-Type is application/problem+json.
func isProblem(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/problem+json"
}
