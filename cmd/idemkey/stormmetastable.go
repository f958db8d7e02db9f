package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/idemclient"
	"github.com/idemkey/idemkey/storm"
)

// "idemkey demo --storm --metastable": a retry storm that outlives its
// trigger. The payments API serves with a bounded pool of workers, and
// every request takes one for a fixed cost (reading it, authenticating
// the caller, answering) before anything else, even one whose client has
// given up while it queued: that work still occupies the pool, the
// sustaining effect. Its provider, behind storm's --proxy hop, slows down
// for 5s: payments hold their worker longer, the queue grows, attempts
// time out, and the clients retry. With naive retries (at once, 5 of
// them) the retries alone are more than the pool can serve, so the queue
// never drains after the provider is fast again: a metastable failure.
// With budget (retries within 20 % of the requests plus 10 a second) the
// same slowdown passes and the service recovers. The retries cannot load
// the provider itself: the idempotency layer answers a retry of a payment
// in progress with 409 without calling it, so the pool in front of it is
// where they pile up.

// metastableConfig is what "idemkey demo --storm --metastable" runs.
type metastableConfig struct {
	rate            float64
	duration        time.Duration // of each arm
	workers         int           // the API's pool
	cost            time.Duration // each request's, on a worker
	providerLatency time.Duration
	slowAt, slowFor time.Duration
	slowLatency     time.Duration // added by the hop's fault
	attemptTimeout  time.Duration
	retries         int
	report          string
	json            bool
}

// defaultMetastable is the demo as the command runs it: two arms of 13s
// (a 2s baseline, the 5s slowdown, 6s to recover in). The pool serves
// 5/60ms = 83 requests a second: 20 payments a second take 32 % of it
// (with the provider's 20ms); naive's 6 attempts per payment once they
// time out take 144 %, more than it has; budget's retries, at most 20 %
// of the requests plus 10 a second, 41 % at most. The figures are sleeps,
// not CPU, so that a busy machine keeps them, and the rate is low: every
// payment runs the store's Lua scripts in the embedded Redis, which a race
// build on a busy machine makes slow.
var defaultMetastable = metastableConfig{rate: 20, duration: 13 * time.Second, workers: 5, cost: 60 * time.Millisecond,
	providerLatency: 20 * time.Millisecond, slowAt: 2 * time.Second, slowFor: 5 * time.Second, slowLatency: 300 * time.Millisecond,
	attemptTimeout: 500 * time.Millisecond, retries: 5}

// workerPool bounds the requests the API serves at once: each takes a
// worker for the pool's cost, first in first out, and those whose client
// is still there go on to the API. A request whose client left while it
// queued still costs its worker (it is not known to be abandoned until it
// is read): the sustaining effect. reset forgets the queue (a restart of
// the service), so that each arm starts afresh.
type workerPool struct {
	slots chan struct{}
	cost  time.Duration
	gen   atomic.Int64 // bumped by reset: requests queued before it cost nothing
	next  http.Handler
}

func (p *workerPool) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/stats" { // the side-effect count: an admin endpoint, not the pool's
		p.next.ServeHTTP(w, r)
		return
	}
	// Read the body first, as a server does on accepting a request: the
	// server notices a client that hangs up only once the body is read.
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	gen := p.gen.Load()
	p.slots <- struct{}{}
	defer func() { <-p.slots }()
	if p.gen.Load() != gen {
		return // the service restarted: its queue is gone
	}
	time.Sleep(p.cost) // the request's fixed cost, whether its client waits or not
	if r.Context().Err() != nil {
		return // its client gave up while it queued
	}
	p.next.ServeHTTP(w, r)
}

// reset forgets the requests queued so far.
func (p *workerPool) reset() { p.gen.Add(1) }

// providerCall makes the API's charges call the provider over HTTP,
// through the hop, before the charge's Redis script runs: the provider's
// network and its latency, which the hop's fault slows down.
type providerCall struct {
	url    atomic.Pointer[string] // the hop's, once storm has opened it
	client *http.Client
}

var _ redis.Hook = (*providerCall)(nil)

func (p *providerCall) DialHook(next redis.DialHook) redis.DialHook { return next }

func (p *providerCall) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (p *providerCall) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if u := p.url.Load(); u != nil && isCharge(cmd) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, *u+"/v1/charges", nil)
			if err != nil {
				return err
			}
			resp, err := p.client.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("provider: %s", resp.Status)
			}
		}
		return next(ctx, cmd)
	}
}

// startProvider serves the provider's charge endpoint on loopback: it
// answers 200 after its latency.
func startProvider(latency time.Duration) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// metastableDemo runs the demo: the naive and budget arms on the same
// schedule, and the report with each arm's recovery. It returns the exit
// code (0 unless a payment was charged twice or the storm could not run)
// and the report.
func metastableDemo(ctx context.Context, cfg metastableConfig, stdout, stderr io.Writer) (int, *storm.Report) {
	providerURL, stopProvider, err := startProvider(cfg.providerLatency)
	if err != nil {
		fmt.Fprintf(stderr, "idemkey demo: %v\n", err)
		return 1, nil
	}
	defer stopProvider()
	call := &providerCall{client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	defer call.client.CloseIdleConnections()
	pool := &workerPool{slots: make(chan struct{}, cfg.workers), cost: cfg.cost}
	d, err := startDemo(demoSetup{latency: 0, stderr: io.Discard, redisHook: call,
		wrap: func(h http.Handler) http.Handler { pool.next = h; return pool }})
	if err != nil {
		fmt.Fprintf(stderr, "idemkey demo: %v\n", err)
		return 1, nil
	}
	defer func() {
		pool.reset() // nothing left to serve: the shutdown does not wait for the queue
		d.close()
	}()

	url := d.base + "/v1/payments"
	out := stdout
	if cfg.json {
		out = io.Discard
	}
	fmt.Fprintf(out, "idemkey demo --storm --metastable: the payments API at %s serves with %d workers, each request %s of one\n",
		url, cfg.workers, cfg.cost)
	fmt.Fprintf(out, "(a request whose client gave up while it queued still takes its worker); its provider answers in %s,\n", cfg.providerLatency)
	fmt.Fprintf(out, "through storm's hop, which adds %s from %s for %s. %s payments/s for %s, clients give up on an attempt\n",
		cfg.slowLatency, cfg.slowAt, cfg.slowFor, strings.TrimSuffix(fmt.Sprintf("%.1f", cfg.rate), ".0"), cfg.duration)
	fmt.Fprintf(out, "after %s and retry up to %d times: once with naive retries, once with a retry budget.\n\n", cfg.attemptTimeout, cfg.retries)

	rep, err := storm.Run(ctx, storm.Config{
		URL:            url,
		Header:         http.Header{"Authorization": {"Bearer demo-merchant"}},
		BodyFor:        demoPayment,
		Rate:           cfg.rate,
		Duration:       cfg.duration,
		AttemptTimeout: cfg.attemptTimeout,
		Timeout:        10 * time.Second,
		Retries:        cfg.retries,
		Policy:         idemclient.Policy{BaseDelay: 50 * time.Millisecond, MaxDelay: time.Second},
		KeyPrefix:      "demo-",
		NoProbe:        true,
		CountURL:       d.base + "/v1/stats",
		CountField:     "provider_charges",
		RetryPolicies:  []string{idemclient.RetryNaive, idemclient.RetryBudget},
		Proxies:        []string{"provider=127.0.0.1:0," + providerURL},
		Faults:         []string{fmt.Sprintf("provider at=%s for=%s latency=%s", cfg.slowAt, cfg.slowFor, cfg.slowLatency)},
		OnHop: func(name, addr string) {
			u := "http://" + addr
			call.url.Store(&u)
		},
		OnStart: pool.reset, // each arm meets the service afresh
	})
	if code := writeDemoStorm(rep, err, cfg.json, cfg.report, stdout, out, stderr); code != 0 {
		return code, rep
	}
	fmt.Fprintln(out)
	for _, arm := range rep.Arms {
		rec := arm.Recovery
		switch {
		case rec == nil:
			fmt.Fprintf(out, "%-7s no recovery measured\n", arm.Policy)
		case rec.Recovered:
			fmt.Fprintf(out, "%-7s recovered %.1fs after the provider was fast again (amplification %.2f)\n", arm.Policy, rec.Seconds, arm.Load.Amplification)
		default:
			fmt.Fprintf(out, "%-7s METASTABLE: still degraded %.1fs after the provider was fast again (amplification %.2f)\n",
				arm.Policy, rec.Seconds, arm.Load.Amplification)
		}
	}
	if rep.Verdict() == storm.VerdictFail {
		fmt.Fprintf(out, "\nexactly once: FAIL\n")
		return 1, rep
	}
	fmt.Fprintf(out, "\nexactly once: no payment charged twice (a key without a final answer is inconclusive, not failed)\n")
	return 0, rep
}

// errMetastableFlags is what demo says of flags --metastable does not take.
var errMetastableFlags = errors.New("--metastable runs its own schedule: it takes --report and --json only")

// metastableFlagsOK reports whether only the flags --metastable takes
// were set.
func metastableFlagsOK(set map[string]bool) bool {
	for name := range set {
		switch name {
		case "storm", "metastable", "report", "json":
		default:
			return false
		}
	}
	return true
}
