// Package loadgen is a small closed-loop HTTP load generator for throughput
// benchmarks.
//
// Run starts Config.Concurrency workers. Each worker builds a request with
// Config.Request, sends it, reads the whole response body, closes it, and
// immediately sends its next request (closed loop: the offered load adapts to
// the server, there is no request rate to configure). The run ends when
// Config.Duration has elapsed or Config.MaxRequests requests have been
// started, whichever comes first; requests in flight at that point are
// allowed to finish and are counted.
//
// The generator is meant to share the machine with the server under test, so
// its hot path is kept lean: latency samples and status counts go to
// per-worker storage allocated up front and are merged once at the end, and
// response bodies are drained into a per-worker buffer that is reused.
package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

const (
	defaultConcurrency = 64
	defaultTimeout     = 30 * time.Second
	// maxPrealloc caps the latency samples preallocated per worker; beyond
	// it the slice grows by appending.
	maxPrealloc = 1 << 16
	// defaultPrealloc is the per-worker preallocation when the number of
	// requests cannot be derived from MaxRequests.
	defaultPrealloc = 1 << 12
	// maxStatus bounds the status codes counted in per-worker arrays; any
	// other code is counted in a per-worker map.
	maxStatus = 600
)

// ErrInvalidConfig is wrapped by the errors Run returns for a Config it
// cannot run.
var ErrInvalidConfig = errors.New("invalid loadgen config")

// Config describes one load run. At least one of Duration and MaxRequests
// must be positive.
type Config struct {
	// Concurrency is the number of workers, each with at most one request in
	// flight; 0 means 64.
	Concurrency int
	// Duration bounds the run: no request is started after it has elapsed.
	// 0 means no time bound.
	Duration time.Duration
	// MaxRequests bounds the number of requests started by all workers
	// together; 0 means no count bound.
	MaxRequests int
	// Request builds the request a worker sends next. worker is the worker
	// index (0 to Concurrency-1) and seq counts the requests of that worker
	// from 0, so (worker, seq) is unique within a run. It is called
	// concurrently from all workers. An error from Request aborts the run and
	// is returned by Run. When the returned request carries no context of its
	// own, Run attaches one that is cancelled with the ctx given to Run.
	Request func(worker, seq int) (*http.Request, error)
	// Client sends the requests. When nil, Run uses NewClient(Concurrency)
	// and closes its idle connections at the end.
	Client *http.Client
	// Check, when set, is called with every response and its complete body
	// (the body bytes are only valid during the call; the response body is
	// already closed). A non-nil error counts the request as an error. It is
	// called concurrently from all workers.
	Check func(resp *http.Response, body []byte) error
}

// Result holds the figures of a run.
type Result struct {
	// Requests is the number of requests completed: HTTP responses plus
	// transport errors. Requests abandoned because the ctx given to Run was
	// cancelled are not counted.
	Requests int
	// Errors counts transport errors (including errors while reading the
	// body) and responses rejected by Config.Check.
	Errors int
	// FirstError is the first error counted in Errors, nil when there was
	// none.
	FirstError error
	// Elapsed is the wall-clock time from the start of the run until the last
	// request finished.
	Elapsed time.Duration
	// RPS is Requests divided by Elapsed, in requests per second.
	RPS float64
	// P50, P90 and P99 are nearest-rank latency percentiles over the
	// requests that received an HTTP response (responses rejected by Check
	// included); Max is the highest such latency. Latency runs from just
	// before the request is sent until its body has been read.
	P50, P90, P99, Max time.Duration
	// Status counts HTTP responses by status code.
	Status map[int]int
}

// String renders the result on one line.
func (r *Result) String() string {
	return fmt.Sprintf("%d requests in %s (%.1f req/s), %d errors, latency p50 %s p90 %s p99 %s max %s",
		r.Requests, r.Elapsed.Round(time.Millisecond), r.RPS, r.Errors, r.P50, r.P90, r.P99, r.Max)
}

// NewClient returns an HTTP client for n concurrent workers: a keep-alive
// transport that keeps up to n idle connections per host (so a closed-loop
// worker reuses its connection instead of dialing again), a 30s overall
// timeout per request, and no redirect following.
func NewClient(n int) *http.Client {
	if n <= 0 {
		n = defaultConcurrency
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = n
	tr.MaxIdleConnsPerHost = n
	tr.MaxConnsPerHost = 0
	tr.DisableKeepAlives = false
	tr.DisableCompression = true
	return &http.Client{
		Transport: tr,
		Timeout:   defaultTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// worker holds the per-worker state; it is only touched by its goroutine
// until the run is over.
type worker struct {
	latencies []time.Duration
	status    [maxStatus]int
	other     map[int]int // status codes outside [0, maxStatus)
	requests  int
	errors    int
	firstErr  error
	fatal     error
	body      bytes.Buffer
}

// Run executes the load described by cfg. It returns an error wrapping
// ErrInvalidConfig, and no result, when cfg is invalid. When Config.Request
// fails or ctx is cancelled, Run stops starting requests, waits for those in
// flight, and returns the partial result together with the error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	switch {
	case cfg.Request == nil:
		return nil, fmt.Errorf("%w: Request is required", ErrInvalidConfig)
	case cfg.Concurrency < 0:
		return nil, fmt.Errorf("%w: concurrency must not be negative", ErrInvalidConfig)
	case cfg.Duration < 0 || cfg.MaxRequests < 0:
		return nil, fmt.Errorf("%w: duration and max requests must not be negative", ErrInvalidConfig)
	case cfg.Duration == 0 && cfg.MaxRequests == 0:
		return nil, fmt.Errorf("%w: one of duration and max requests must be positive", ErrInvalidConfig)
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = defaultConcurrency
	}
	if cfg.MaxRequests > 0 && cfg.Concurrency > cfg.MaxRequests {
		cfg.Concurrency = cfg.MaxRequests
	}
	client := cfg.Client
	if client == nil {
		client = NewClient(cfg.Concurrency)
		defer client.CloseIdleConnections()
	}

	prealloc := defaultPrealloc
	if cfg.MaxRequests > 0 {
		prealloc = min(cfg.MaxRequests/cfg.Concurrency+1, maxPrealloc)
	}
	workers := make([]*worker, cfg.Concurrency)
	for i := range workers {
		workers[i] = &worker{latencies: make([]time.Duration, 0, prealloc)}
	}

	// stop is cancelled to stop starting requests (fatal error); ctx
	// cancellation also aborts the requests in flight.
	stopCtx, stop := context.WithCancel(ctx)
	defer stop()
	var started atomic.Int64
	start := time.Now()
	var deadline time.Time
	if cfg.Duration > 0 {
		deadline = start.Add(cfg.Duration)
	}

	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Go(func() {
			w.run(ctx, stopCtx, stop, &cfg, client, i, deadline, &started)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	res := &Result{Elapsed: elapsed, Status: map[int]int{}}
	n := 0
	for _, w := range workers {
		n += len(w.latencies)
	}
	all := make([]time.Duration, 0, n)
	var fatal error
	for _, w := range workers {
		res.Requests += w.requests
		res.Errors += w.errors
		if res.FirstError == nil {
			res.FirstError = w.firstErr
		}
		if fatal == nil {
			fatal = w.fatal
		}
		all = append(all, w.latencies...)
		for code, c := range w.status {
			if c > 0 {
				res.Status[code] += c
			}
		}
		for code, c := range w.other {
			res.Status[code] += c
		}
	}
	if elapsed > 0 {
		res.RPS = float64(res.Requests) / elapsed.Seconds()
	}
	if len(all) > 0 {
		slices.Sort(all)
		res.P50, res.P90, res.P99 = rank(all, 50), rank(all, 90), rank(all, 99)
		res.Max = all[len(all)-1]
	}
	if fatal != nil {
		return res, fatal
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, nil
}

// run is the closed loop of one worker.
func (w *worker) run(ctx, stopCtx context.Context, stop context.CancelFunc, cfg *Config,
	client *http.Client, id int, deadline time.Time, started *atomic.Int64) {
	for seq := 0; ; seq++ {
		if stopCtx.Err() != nil {
			return
		}
		if cfg.MaxRequests > 0 && started.Add(1) > int64(cfg.MaxRequests) {
			return
		}
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return
		}
		req, err := cfg.Request(id, seq)
		if err == nil && req == nil {
			err = errors.New("the Request function returned a nil request")
		}
		if err != nil {
			w.fatal = fmt.Errorf("loadgen: worker %d request %d: %w", id, seq, err)
			stop()
			return
		}
		if req.Context() == context.Background() {
			req = req.WithContext(ctx)
		}
		w.do(ctx, cfg, client, req)
	}
}

// do sends req and records its outcome.
func (w *worker) do(ctx context.Context, cfg *Config, client *http.Client, req *http.Request) {
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			w.fail(err)
		}
		return
	}
	var readErr error
	if cfg.Check != nil {
		w.body.Reset()
		_, readErr = w.body.ReadFrom(resp.Body)
	} else {
		_, readErr = io.Copy(io.Discard, resp.Body)
	}
	_ = resp.Body.Close()
	lat := time.Since(t0)
	if readErr != nil {
		if ctx.Err() == nil {
			w.fail(fmt.Errorf("reading %d response body: %w", resp.StatusCode, readErr))
		}
		return
	}
	w.latencies = append(w.latencies, lat)
	if code := resp.StatusCode; code >= 0 && code < maxStatus {
		w.status[code]++
	} else {
		if w.other == nil {
			w.other = map[int]int{}
		}
		w.other[code]++
	}
	w.requests++
	if cfg.Check != nil {
		if err := cfg.Check(resp, w.body.Bytes()); err != nil {
			w.errors++
			if w.firstErr == nil {
				w.firstErr = fmt.Errorf("check: %w", err)
			}
		}
	}
}

// fail records a transport error.
func (w *worker) fail(err error) {
	w.requests++
	w.errors++
	if w.firstErr == nil {
		w.firstErr = err
	}
}

// rank returns the nearest-rank p-th percentile of the sorted samples.
func rank(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
