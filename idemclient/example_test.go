package idemclient_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/idemkey/idemkey/idemclient"
)

// paymentsServer is a toy idempotent API: the first request with a key
// runs and is stored, later ones get the stored answer. With unavailable,
// the first request of each key gets 503 and nothing is stored; with drop,
// the answer of each execution is stored, then lost with the connection.
func paymentsServer(unavailable, drop bool) *httptest.Server {
	var mu sync.Mutex
	seen, stored := map[string]int{}, map[string]string{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		seen[key]++
		n, body, replay := seen[key], stored[key], stored[key] != ""
		if unavailable && n == 1 {
			mu.Unlock()
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if !replay {
			body = fmt.Sprintf(`{"id":"pay_%d"}`, len(stored)+1)
			stored[key] = body
		}
		mu.Unlock()
		if replay {
			w.Header().Set("Idempotent-Replayed", "true")
		} else if drop {
			panic(http.ErrAbortHandler) // close the connection without an answer
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, body)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	return srv
}

// A client whose POSTs carry a fresh key, retried on 503 with the same key
// and body.
func ExampleNew() {
	srv := paymentsServer(true, false)
	defer srv.Close()

	t, err := idemclient.New(nil, idemclient.Options{})
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: t, Timeout: 10 * time.Second}
	resp, err := client.Post(srv.URL+"/v1/payments", "application/json", strings.NewReader(`{"amount":1200}`))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)

	r, _ := idemclient.ResultOf(resp, err)
	fmt.Println(resp.Status, string(body))
	fmt.Println("attempts:", r.Attempts, "minted:", r.KeyMinted, "key length:", len(r.Key))
	fmt.Println("first attempt:", r.History[0].Status, "Retry-After:", r.RetryAfter)
	// Output:
	// 201 Created {"id":"pay_1"}
	// attempts: 2 minted: true key length: 36
	// first attempt: 503 Retry-After: 0s
}

// The answer is lost on the way back, after the server stored it: the
// retry gets the stored answer, and the payment was made once.
func ExampleResultOf() {
	srv := paymentsServer(false, true)
	defer srv.Close()

	t, _ := idemclient.New(nil, idemclient.Options{})
	client := &http.Client{Transport: t}
	resp, err := client.Post(srv.URL+"/v1/payments", "application/json", strings.NewReader(`{"amount":1200}`))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)

	r, ok := idemclient.ResultOf(resp, err)
	fmt.Println(ok, resp.StatusCode, string(body))
	fmt.Println("attempts:", r.Attempts, "replayed:", r.Replayed, "stop:", r.Stop)
	fmt.Println("first attempt failed:", r.History[0].Err != nil)
	// Output:
	// true 201 {"id":"pay_1"}
	// attempts: 2 replayed: true stop: final
	// first attempt failed: true
}

// A job keeps its key across restarts: pin it, and every run of the job
// sends it, so the server runs the payment once.
func ExampleWithKey() {
	srv := paymentsServer(false, false)
	defer srv.Close()
	t, _ := idemclient.New(nil, idemclient.Options{})
	client := &http.Client{Transport: t}

	jobKey := "invoice-2025-0042" // stored with the job
	for run := 1; run <= 2; run++ {
		ctx := idemclient.WithKey(context.Background(), jobKey)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/payments", strings.NewReader(`{"amount":1200}`))
		resp, err := client.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r, _ := idemclient.ResultOf(resp, nil)
		fmt.Printf("run %d: %s key=%s replayed=%v\n", run, body, r.Key, r.Replayed)
	}
	// Output:
	// run 1: {"id":"pay_1"} key=invoice-2025-0042 replayed=false
	// run 2: {"id":"pay_1"} key=invoice-2025-0042 replayed=true
}

// Options.OnResult sees every request once: for logs and metrics.
func ExampleOptions_onResult() {
	srv := paymentsServer(false, false)
	defer srv.Close()
	t, _ := idemclient.New(nil, idemclient.Options{
		OnResult: func(req *http.Request, r idemclient.Result) {
			fmt.Println(req.Method, req.URL.Path, "attempts:", r.Attempts, "retries:", r.Retries(), "stop:", r.Stop)
		},
	})
	resp, err := (&http.Client{Transport: t}).Post(srv.URL+"/v1/payments", "application/json", strings.NewReader(`{}`))
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	// Output:
	// POST /v1/payments attempts: 1 retries: 0 stop: final
}

func ExampleParseRetryAfter() {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, v := range []string{"120", "0.5", "Sun, 01 Jun 2025 12:00:30 GMT", "soon"} {
		d, ok := idemclient.ParseRetryAfter(v, now)
		fmt.Println(v, "=>", d, ok)
	}
	// Output:
	// 120 => 2m0s true
	// 0.5 => 500ms true
	// Sun, 01 Jun 2025 12:00:30 GMT => 30s true
	// soon => 0s false
}

// Policy is the waiting half of the retry policy, for any retry loop: the
// server's Retry-After, clamped, or exponential backoff with full jitter.
// Rand is pinned here to show the ceilings' midpoints.
func ExamplePolicy_Delay() {
	p := idemclient.Policy{BaseDelay: 100 * time.Millisecond, MaxRetryAfter: 10 * time.Second, Rand: func() float64 { return 0.5 }}
	now := time.Now()
	for retry := 1; retry <= 4; retry++ {
		fmt.Println("retry", retry, "without Retry-After:", p.Delay(retry, "", now))
	}
	fmt.Println("Retry-After: 3    =>", p.Delay(1, "3", now))
	fmt.Println("Retry-After: 3600 =>", p.Delay(1, "3600", now))
	// Output:
	// retry 1 without Retry-After: 50ms
	// retry 2 without Retry-After: 100ms
	// retry 3 without Retry-After: 200ms
	// retry 4 without Retry-After: 400ms
	// Retry-After: 3    => 3s
	// Retry-After: 3600 => 10s
}

// A retry policy chosen by name, as idemkey storm's --retry-policy names
// it: the one that kept the service standing in a storm is shipped with
// one option. Here budget: backoff (the server's Retry-After: 0 here), and
// retries only within 20 % of the requests of the last 10 s plus 10 a
// second, shared by every request through the Transport.
func ExampleNewRetryPolicy() {
	srv := paymentsServer(true, false)
	defer srv.Close()

	fmt.Println(strings.Join(idemclient.RetryPolicyNames(), " "))
	rp, err := idemclient.NewRetryPolicy(idemclient.RetryBudget, idemclient.RetryOptions{})
	if err != nil {
		panic(err)
	}
	t, err := idemclient.New(nil, idemclient.Options{RetryPolicy: rp})
	if err != nil {
		panic(err)
	}
	resp, err := (&http.Client{Transport: t}).Post(srv.URL+"/v1/payments", "application/json", strings.NewReader(`{"amount":1200}`))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	r, _ := idemclient.ResultOf(resp, err)
	fmt.Println(rp, resp.Status, "attempts:", r.Attempts)
	// Output:
	// backoff naive budget token-bucket adaptive
	// budget 201 Created attempts: 2
}
