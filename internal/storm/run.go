package storm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
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
	retryAfter string
	err        error
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
		tr := newTransport(cfg.Concurrency)
		defer tr.CloseIdleConnections()
		r.client = newClient(tr)
		probe := newTransport(cfg.Concurrency)
		probe.DisableKeepAlives = true // a fresh connection for every probe
		r.probeClient = newClient(probe)
	}
	keys, err := r.keys()
	if err != nil {
		return nil, err
	}

	var before int64
	if cfg.CountURL != "" {
		if before, err = r.readCount(ctx); err != nil {
			return nil, fmt.Errorf("%w: before the storm: %v", ErrCount, err)
		}
	}

	start := time.Now()
	stopProgress := r.startProgress(start)
	r.storm(ctx, keys)
	elapsed := time.Since(start)
	interrupted := ctx.Err() != nil && r.completed.Load() < int64(cfg.Keys*cfg.Dups)
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
		return rep, ctx.Err()
	}
	return rep, nil
}

// keys generates the storm's keys and what each sends.
func (r *runner) keys() ([]*keyRun, error) {
	cfg := r.cfg
	base := cfg.Header.Clone()
	if base == nil {
		base = http.Header{}
	}
	if base.Get("User-Agent") == "" {
		base.Set("User-Agent", "idemkey-storm")
	}
	keys := make([]*keyRun, cfg.Keys)
	for i := range keys {
		k := &keyRun{key: cfg.KeyPrefix + newKey(), gate: make(chan struct{})}
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
		keys[i] = k
	}
	return keys, nil
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

// newTransport returns a keep-alive transport sized for n workers.
func newTransport(n int) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = n
	tr.MaxIdleConnsPerHost = n
	tr.MaxConnsPerHost = 0
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
	var body io.Reader = http.NoBody
	if len(k.body) > 0 {
		body = bytes.NewReader(k.body)
	}
	req, err := http.NewRequestWithContext(rctx, r.cfg.Method, r.target.String(), body)
	if err != nil {
		return attempt{err: err}, true
	}
	req.Header = k.header.Clone()
	if k.host != "" {
		req.Host = k.host
	}
	client := r.client
	if probe {
		client = r.probeClient
	}

	r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return attempt{}, false
		}
		return attempt{err: err, latency: time.Since(start)}, true
	}
	a = attempt{
		status:     resp.StatusCode,
		replay:     strings.EqualFold(strings.TrimSpace(resp.Header.Get(headerReplayed)), "true"),
		retryAfter: resp.Header.Get("Retry-After"),
	}
	h := sha256.New()
	snip := &prefixWriter{max: snippetLen}
	var problem *prefixWriter
	w := io.MultiWriter(h, snip)
	if a.replay && isProblem(resp.Header.Get("Content-Type")) {
		problem = &prefixWriter{max: maxProblemBytes + 1}
		w = io.MultiWriter(h, snip, problem)
	}
	a.size, err = io.Copy(w, resp.Body)
	_ = resp.Body.Close()
	a.latency = time.Since(start)
	if err != nil {
		if ctx.Err() != nil {
			return attempt{}, false
		}
		return attempt{err: fmt.Errorf("reading %d response body: %w", resp.StatusCode, err), latency: a.latency}, true
	}
	h.Sum(a.sum[:0])
	a.snippet = snip.buf
	a.oversize = problem != nil && isTooLarge(problem.buf, a.status)
	return a, true
}

// isProblem reports whether a Content-Type is application/problem+json.
func isProblem(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/problem+json"
}

// prefixWriter keeps the first max bytes written to it.
type prefixWriter struct {
	max int
	buf []byte
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	if room := w.max - len(w.buf); room > 0 {
		w.buf = append(w.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}
