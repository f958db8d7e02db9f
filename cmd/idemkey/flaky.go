package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkey/idemkey/examples/payments"
	"github.com/idemkey/idemkey/idemclient"
)

// flakyConfig is what "idemkey demo --flaky" runs.
type flakyConfig struct {
	payments, concurrency int
	latency               time.Duration
	drop, unavailable     float64 // shares of attempts
	seed                  uint64
	maxAttempts           int
}

// flakyTally is what the clients saw.
type flakyTally struct {
	mu                sync.Mutex
	created, replayed int
	failed            []string
	attempts, retries int
	after             map[string]int // retries by what came before them
	ids               map[string]bool
}

// flakyDemo sends cfg.payments payments through idemclient's Transport to
// the payments API behind a flaky network, and checks that each was made
// exactly once.
func flakyDemo(ctx context.Context, cfg flakyConfig, stdout, stderr io.Writer) int {
	if cfg.maxAttempts == 0 {
		cfg.maxAttempts = 10
	}
	var chaos *flakyNetwork
	d, err := startDemo(demoSetup{latency: cfg.latency, faults: true, wait: 5 * time.Second, stderr: stderr, wrap: func(api http.Handler) http.Handler {
		chaos = &flakyNetwork{next: api, drop: cfg.drop, unavailable: cfg.unavailable, rng: rand.New(rand.NewPCG(cfg.seed, cfg.seed))}
		return chaos
	}})
	if err != nil {
		fmt.Fprintf(stderr, "idemkey demo: %v\n", err)
		return 1
	}
	defer d.close()
	api := d.api

	budget, err := idemclient.NewBudget(idemclient.BudgetOptions{Ratio: 1, Burst: float64(cfg.concurrency)})
	if err != nil {
		fmt.Fprintf(stderr, "idemkey demo: %v\n", err)
		return 1
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = cfg.concurrency
	defer base.CloseIdleConnections()
	tr, err := idemclient.New(base, idemclient.Options{MaxAttempts: cfg.maxAttempts, Budget: budget})
	if err != nil {
		fmt.Fprintf(stderr, "idemkey demo: %v\n", err)
		return 1
	}
	client := &http.Client{Transport: tr, Timeout: time.Minute}

	url := d.base + "/v1/payments"
	fmt.Fprintf(stdout, "idemkey demo --flaky: the payments API (examples/payments) on embedded Redis, at %s\n", url)
	fmt.Fprintf(stdout, "the network: %.0f%% of attempts lose their answer after the payment is made and stored (drop-response),\n", 100*cfg.drop)
	fmt.Fprintf(stdout, "             %.0f%% of attempts answered 503 by the provider (provider-unavailable, Retry-After: 1)\n", 100*cfg.unavailable)
	fmt.Fprintf(stdout, "the client:  idemclient.Transport, one UUIDv7 key per payment, up to %d attempts, retry budget 1 per request\n\n", cfg.maxAttempts)

	tally := &flakyTally{after: map[string]int{}, ids: map[string]bool{}}
	jobs := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range min(cfg.concurrency, cfg.payments) {
		wg.Go(func() {
			for i := range jobs {
				tally.add(flakyPay(ctx, client, url, i))
			}
		})
	}
	for i := range cfg.payments {
		select {
		case jobs <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(jobs)
	wg.Wait()
	took := time.Since(start)
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "idemkey demo: interrupted: %v\n", ctx.Err())
		return 1
	}

	t := tally
	fmt.Fprintf(stdout, "%d payments sent by %d workers in %s\n", cfg.payments, min(cfg.concurrency, cfg.payments), took.Round(time.Millisecond))
	fmt.Fprintf(stdout, "  %-24s %d (%d of them the stored answer, after the first was lost)\n", "answered 201 Created", t.created, t.replayed)
	fmt.Fprintf(stdout, "  %-24s %d\n", "failed", len(t.failed))
	fmt.Fprintf(stdout, "  %-24s %d\n", "attempts", t.attempts)
	fmt.Fprintf(stdout, "  %-24s %d by idemclient (%d after a lost answer, %d after a 503, %d after a 409, %d other)\n", "retries", t.retries,
		t.after["error"], t.after["503"], t.after["409"], t.retries-t.after["error"]-t.after["503"]-t.after["409"])
	seen := chaos.requests.Load() // every retry reaches the server: idemclient's and net/http's own
	fmt.Fprintf(stdout, "  %-24s %d", "requests at the server", seen)
	if extra := seen - int64(t.attempts); extra > 0 {
		fmt.Fprintf(stdout, " (%d more than idemclient's attempts: net/http's own replays on reused connections, same key)", extra)
	}
	fmt.Fprintln(stdout)
	for _, f := range t.failed[:min(5, len(t.failed))] {
		fmt.Fprintf(stdout, "  failed: %s\n", f)
	}

	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := api.Stats(sctx)
	if err != nil {
		fmt.Fprintf(stderr, "idemkey demo: reading the side effects: %v\n", err)
		return 1
	}
	want := int64(cfg.payments)
	fmt.Fprintf(stdout, "\nside effects, read back from Redis:\n")
	fmt.Fprintf(stdout, "  %-22s %d\n", "payments asked for", want)
	fmt.Fprintf(stdout, "  %-22s %d\n", "payments created", st.PaymentsCreated)
	fmt.Fprintf(stdout, "  %-22s %d\n", "provider charges", st.ProviderCharges)
	fmt.Fprintf(stdout, "  %-22s %d\n", "provider deduplicated", st.ProviderDeduplicated)

	var problems []string
	if len(t.failed) > 0 {
		problems = append(problems, fmt.Sprintf("%d payments got no 201", len(t.failed)))
	}
	if len(t.ids) != t.created {
		problems = append(problems, fmt.Sprintf("%d distinct payments in %d answers", len(t.ids), t.created))
	}
	if st.PaymentsCreated != want || st.ProviderCharges != want {
		problems = append(problems, fmt.Sprintf("%d payments and %d charges for %d payments sent", st.PaymentsCreated, st.ProviderCharges, want))
	}
	if len(problems) > 0 {
		fmt.Fprintf(stdout, "\nexactly once: FAIL (%s)\n", strings.Join(problems, "; "))
		return 1
	}
	fmt.Fprintf(stdout, "\nexactly once: PASS (%d payments, %d charges, %d retries: %d requests at the server)\n",
		st.PaymentsCreated, st.ProviderCharges, seen-want, seen)
	return 0
}

// flakyOutcome is how one payment went.
type flakyOutcome struct {
	res     idemclient.Result
	status  int
	payment string // its ID, on a 201
	err     error
}

// flakyPay sends the i-th payment and reads its answer.
func flakyPay(ctx context.Context, client *http.Client, url string, i int) flakyOutcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(demoPayment("", i))))
	if err != nil {
		return flakyOutcome{err: err}
	}
	req.Header.Set("Authorization", "Bearer demo-merchant")
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	res, _ := idemclient.ResultOf(resp, err)
	if err != nil {
		return flakyOutcome{res: res, err: err}
	}
	defer resp.Body.Close()
	var p payments.Payment
	if resp.StatusCode == http.StatusCreated {
		err = json.NewDecoder(resp.Body).Decode(&p)
	}
	return flakyOutcome{res: res, status: resp.StatusCode, payment: p.ID, err: err}
}

func (t *flakyTally) add(o flakyOutcome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.attempts += o.res.Attempts
	t.retries += o.res.Retries()
	for _, a := range o.res.History[:max(0, len(o.res.History)-1)] {
		switch {
		case a.Err != nil:
			t.after["error"]++
		case a.Status == http.StatusServiceUnavailable || a.Status == http.StatusConflict:
			t.after[fmt.Sprint(a.Status)]++
		}
	}
	switch {
	case o.err != nil:
		t.failed = append(t.failed, fmt.Sprintf("key %s: %v", o.res.Key, o.err))
	case o.status != http.StatusCreated || o.payment == "":
		t.failed = append(t.failed, fmt.Sprintf("key %s: %d after %d attempts (%s)", o.res.Key, o.status, o.res.Attempts, o.res.Stop))
	default:
		t.created++
		t.ids[o.payment] = true
		if o.res.Replayed {
			t.replayed++
		}
	}
}

// flakyNetwork puts the payments API behind a flaky network: it asks for
// the drop-response drill on a share of the payment requests (the answer of
// an execution is lost after it is stored) and for provider-unavailable on
// another (503). The API ignores the drill where it does not apply: a
// replay is never dropped.
type flakyNetwork struct {
	next              http.Handler
	drop, unavailable float64
	requests          atomic.Int64
	mu                sync.Mutex
	rng               *rand.Rand
}

func (n *flakyNetwork) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/v1/payments" {
		n.requests.Add(1)
		n.mu.Lock()
		x := n.rng.Float64()
		n.mu.Unlock()
		switch {
		case x < n.drop:
			r.Header.Set(payments.FaultHeader, payments.FaultDropResponse)
		case x < n.drop+n.unavailable:
			r.Header.Set(payments.FaultHeader, payments.FaultProviderUnavailable)
		default:
			r.Header.Del(payments.FaultHeader)
		}
	}
	n.next.ServeHTTP(w, r)
}
