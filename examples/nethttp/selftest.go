package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// warehouse stands in for a downstream fulfilment API that accepts an
// idempotency key: given a key it has seen, it returns the earlier shipment
// and ships nothing. It counts the calls it gets. It is safe for concurrent use.
type warehouse struct {
	latency time.Duration

	mu        sync.Mutex
	calls     int
	shipments map[string]string // idempotency key -> shipment ID
}

func newWarehouse(latency time.Duration) *warehouse {
	return &warehouse{latency: latency, shipments: map[string]string{}}
}

func (wh *warehouse) fulfil(ctx context.Context, key, orderID string, qty int) (string, error) {
	if key == "" {
		return "", errors.New("warehouse: idempotency key required")
	}
	select {
	case <-time.After(wh.latency):
	case <-ctx.Done():
		return "", ctx.Err()
	}
	wh.mu.Lock()
	defer wh.mu.Unlock()
	wh.calls++
	if id, ok := wh.shipments[key]; ok {
		return id, nil
	}
	id := fmt.Sprintf("shp_%d", len(wh.shipments)+1)
	wh.shipments[key] = id
	return id, nil
}

func (wh *warehouse) counts() (calls, shipments int) {
	wh.mu.Lock()
	defer wh.mu.Unlock()
	return wh.calls, len(wh.shipments)
}

// reply is what the client saw.
type reply struct {
	Status               int
	Replayed             bool
	Location, RetryAfter string
	Body                 string
}

func (r reply) String() string {
	s := fmt.Sprint(r.Status)
	if r.Replayed {
		s += " Idempotent-Replayed: true"
	}
	if r.Location != "" {
		s += " Location: " + r.Location
	}
	if r.RetryAfter != "" {
		s += " Retry-After: " + r.RetryAfter
	}
	return s + "  " + r.Body
}

// call sends one request as the holder of apiKey, with an Idempotency-Key
// unless idemKey is empty.
func call(ctx context.Context, method, url, apiKey, idemKey, body string) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	h := resp.Header
	r := reply{resp.StatusCode, h.Get("Idempotent-Replayed") == "true", h.Get("Location"), h.Get("Retry-After"), strings.TrimSpace(string(b))}
	var p struct{ Title string }
	if h.Get("Content-Type") == "application/problem+json" && json.Unmarshal(b, &p) == nil {
		r.Body = "problem: " + p.Title // the middleware's RFC 9457 answers
	}
	return r, err
}

// selftest sends requests to the API at base, prints each answer, and returns
// an error if any is not what the Idempotency-Key contract promises.
func selftest(ctx context.Context, base string, wh *warehouse, out io.Writer) error {
	var wrong []string
	expect := func(ok bool, format string, args ...any) {
		if !ok {
			wrong = append(wrong, fmt.Sprintf(format, args...))
		}
	}
	send := func(label, apiKey, idemKey, body string) reply {
		r, err := call(ctx, http.MethodPost, base+"/v1/orders", apiKey, idemKey, body)
		expect(err == nil, "%s: %v", label, err)
		fmt.Fprintf(out, "%-26s %v\n", label+":", r)
		return r
	}
	run := rand.Text()[:8] // fresh keys per run: a real Redis keeps records for 24h
	k1, k2 := run+"-1", run+"-2"

	first := send("create (alice, key 1)", "sk_test_alice", k1, `{"sku":"book","qty":1}`)
	expect(first.Status == http.StatusCreated && !first.Replayed && first.Location != "", "create: %v", first)
	// Reordered and re-spaced JSON is the same request: the fingerprint is canonical.
	r := send("retry", "sk_test_alice", k1, `{ "qty": 1, "sku": "book" }`)
	expect(r.Status == http.StatusCreated && r.Replayed && r.Location == first.Location && r.Body == first.Body, "retry: %v", r)

	burst := make([]reply, 5)
	var wg sync.WaitGroup
	for i := range burst {
		wg.Go(func() {
			burst[i], _ = call(ctx, http.MethodPost, base+"/v1/orders", "sk_test_alice", k2, `{"sku":"pen","qty":3}`)
		})
	}
	wg.Wait()
	created := 0
	for i, r := range burst {
		fmt.Fprintf(out, "%-26s %v\n", fmt.Sprintf("burst %d (alice, key 2):", i+1), r)
		switch {
		case r.Status == http.StatusCreated && !r.Replayed:
			created++
		case r.Status == http.StatusConflict && r.RetryAfter == "1", r.Status == http.StatusCreated && r.Replayed:
		default:
			expect(false, "burst %d: %v", i+1, r)
		}
	}
	expect(created == 1, "burst created %d orders, want 1", created)
	r = send("retry after the burst", "sk_test_alice", k2, `{"sku":"pen","qty":3}`)
	expect(r.Status == http.StatusCreated && r.Replayed, "retry after the burst: %v", r)

	r = send("key 1, other body", "sk_test_alice", k1, `{"sku":"book","qty":2}`)
	expect(r.Status == http.StatusUnprocessableEntity, "mismatch: %v", r)
	r = send("no key", "sk_test_alice", "", `{"sku":"book","qty":1}`)
	expect(r.Status == http.StatusBadRequest, "no key: %v", r)
	r = send("create (bob, key 1)", "sk_test_bob", k1, `{"sku":"book","qty":1}`)
	expect(r.Status == http.StatusCreated && !r.Replayed, "bob's key 1 is his own: %v", r)

	r, err := call(ctx, http.MethodGet, base+first.Location, "sk_test_alice", "", "")
	expect(err == nil && r.Status == http.StatusOK, "get: %v %v", r, err)
	fmt.Fprintf(out, "%-26s %v\n", "GET "+first.Location+":", r)

	calls, shipments := wh.counts()
	fmt.Fprintf(out, "warehouse: %d calls, %d shipments for 3 orders\n", calls, shipments)
	expect(calls == 3 && shipments == 3, "warehouse: %d calls, %d shipments, want 3 and 3", calls, shipments)
	if wrong != nil {
		return errors.New("selftest: " + strings.Join(wrong, "; "))
	}
	fmt.Fprintln(out, "ok: every order created and shipped once")
	return nil
}
