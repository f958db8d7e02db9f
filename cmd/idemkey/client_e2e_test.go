package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/examples/payments"
	"github.com/idemkey/idemkey/idemclient"
)

// faultOnce asks for a fault drill on the first attempt of each request
// only, as a flaky network would strike once: the Transport itself sends
// the same headers on every attempt.
type faultOnce struct {
	base  http.RoundTripper
	fault string
	mu    sync.Mutex
	seen  map[string]bool // keys already sent
}

func (f *faultOnce) RoundTrip(req *http.Request) (*http.Response, error) {
	k := req.Header.Get(idemclient.HeaderKey)
	f.mu.Lock()
	first := !f.seen[k]
	f.seen[k] = true
	f.mu.Unlock()
	if first {
		req = req.Clone(req.Context()) // a RoundTripper does not modify its request
		req.Header.Set(payments.FaultHeader, f.fault)
	}
	return f.base.RoundTrip(req)
}

// clientCall is one request through a Transport, its answer read whole.
type clientCall struct {
	status int
	body   string
	res    idemclient.Result
}

func pay(t *testing.T, client *http.Client, ctx context.Context, url, body string, hdr ...string) clientCall {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/payments", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk_test_client")
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		res, _ := idemclient.ResultOf(resp, err)
		require.NoError(t, err, "%+v", res.History)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	res, ok := idemclient.ResultOf(resp, err)
	require.True(t, ok)
	return clientCall{status: resp.StatusCode, body: string(b), res: res}
}

// noWait is an Options.Sleep that does not wait: serve's Retry-After is a
// second, and these answers do not depend on time.
func noWait(ctx context.Context, _ time.Duration) error { return ctx.Err() }

func newClient(t *testing.T, base http.RoundTripper, opts idemclient.Options) *http.Client {
	t.Helper()
	if base == nil {
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		base = tr
	}
	tr, err := idemclient.New(base, opts)
	require.NoError(t, err)
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

// The Transport against "idemkey serve": every rule that the real server
// can show, counted on the server's side.
func TestClientAgainstServe(t *testing.T) {
	s := startServe(t, "--faults", "--provider-latency", "0s")
	ctx := context.Background()
	charges := func() int64 { t.Helper(); return stats(t, s.url).ProviderCharges }

	t.Run("drop-response", func(t *testing.T) {
		before := charges()
		client := newClient(t, nil, idemclient.Options{Sleep: noWait})
		r := pay(t, client, ctx, s.url, payment, payments.FaultHeader, payments.FaultDropResponse)
		require.Equal(t, http.StatusCreated, r.status, r.body)
		require.True(t, r.res.Replayed, "the stored answer of the one execution")
		require.Equal(t, 2, r.res.Attempts, "a fresh connection: net/http does not replay it, the Transport does")
		require.Error(t, r.res.History[0].Err)
		require.True(t, r.res.KeyMinted)
		require.Equal(t, before+1, charges())
	})

	t.Run("drop-response, many", func(t *testing.T) {
		before := stats(t, s.url)
		// Every request needs a retry: more than the default budget allows
		// at once (burst 10), which is the budget's point. Off here.
		client := newClient(t, nil, idemclient.Options{Sleep: noWait, NoBudget: true})
		const n = 20
		var wg sync.WaitGroup
		var created atomic.Int32
		ids := make(chan string, n)
		errs := make(chan error, n)
		for range n {
			wg.Go(func() {
				req, err := http.NewRequest(http.MethodPost, s.url+"/v1/payments", strings.NewReader(payment))
				if err != nil {
					errs <- err
					return
				}
				req.Header.Set("Authorization", "Bearer sk_test_client")
				req.Header.Set(payments.FaultHeader, payments.FaultDropResponse)
				resp, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				if err != nil || resp.StatusCode != http.StatusCreated {
					errs <- fmt.Errorf("%d %s %v", resp.StatusCode, b, err)
					return
				}
				created.Add(1)
				ids <- string(b)
			})
		}
		wg.Wait()
		close(ids)
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.EqualValues(t, n, created.Load(), "one final answer each")
		distinct := map[string]bool{}
		for b := range ids {
			distinct[b] = true
		}
		require.Len(t, distinct, n)
		after := stats(t, s.url)
		require.Equal(t, before.PaymentsCreated+n, after.PaymentsCreated)
		require.Equal(t, before.ProviderCharges+n, after.ProviderCharges, "one execution each")
	})

	t.Run("503 then success", func(t *testing.T) {
		before := charges()
		client := newClient(t, &faultOnce{base: http.DefaultTransport, fault: payments.FaultProviderUnavailable, seen: map[string]bool{}},
			idemclient.Options{Sleep: noWait})
		r := pay(t, client, ctx, s.url, payment)
		require.Equal(t, http.StatusCreated, r.status, r.body)
		require.False(t, r.res.Replayed, "the key was released: the retry ran")
		require.Equal(t, 2, r.res.Attempts)
		require.Equal(t, http.StatusServiceUnavailable, r.res.History[0].Status)
		require.True(t, r.res.HasRetryAfter)
		require.Equal(t, time.Second, r.res.RetryAfter)
		require.Equal(t, time.Second, r.res.History[0].Wait)
		require.Equal(t, before+1, charges())
	})

	t.Run("422 and 400 are final", func(t *testing.T) {
		before := charges()
		client := newClient(t, nil, idemclient.Options{Sleep: noWait})
		pinned := idemclient.WithKey(ctx, "client-e2e-reused")
		r := pay(t, client, pinned, s.url, payment)
		require.Equal(t, http.StatusCreated, r.status, r.body)
		r = pay(t, client, pinned, s.url, `{"amount": 999, "currency": "EUR", "customer": "cus_1"}`)
		require.Equal(t, http.StatusUnprocessableEntity, r.status, r.body)
		require.Equal(t, 1, r.res.Attempts)
		require.Equal(t, idemclient.StopFinal, r.res.Stop)
		r = pay(t, client, ctx, s.url, `{"amount": `)
		require.Equal(t, http.StatusBadRequest, r.status, r.body)
		require.Equal(t, 1, r.res.Attempts)
		require.Equal(t, before+1, charges())
	})

	t.Run("caller's key", func(t *testing.T) {
		client := newClient(t, nil, idemclient.Options{KeyFormat: idemclient.FormatString, Sleep: noWait})
		r := pay(t, client, ctx, s.url, payment, idemclient.HeaderKey, "client-e2e-own", payments.FaultHeader, payments.FaultDropResponse)
		require.Equal(t, http.StatusCreated, r.status)
		require.Equal(t, "client-e2e-own", r.res.Key)
		require.False(t, r.res.KeyMinted)
		rec, out := inspectJSON(t, "--redis", s.redis, "--bearer", "sk_test_client", "client-e2e-own")
		require.Equal(t, 0, out.code, out.stderr)
		require.Equal(t, "client-e2e-own", rec.Key, "stored under the caller's key, unchanged")
		require.Equal(t, 1, rec.Attempt)
	})
}

// A client that gives up on a slow attempt retries with the same key: the
// server, still running the first attempt, answers 409 with Retry-After,
// then the stored answer. One charge.
//
// Skipped until the protected run outlives a client that gives up: today
// the handler runs on the request's
// context, so the attempt that times out cancels its own run (the provider
// call fails, the key is released) and every retry starts over and times
// out again — 18 attempts, no answer, no charge. Remove the Skip with that
// fix; this test is its end-to-end check.
func TestClientTimesOutAndGetsTheReplay(t *testing.T) {
	t.Skip("needs the protected run to outlive a client that gives up")
	s := startServe(t, "--wait", "0s", "--provider-latency", "1500ms")
	client := newClient(t, nil, idemclient.Options{AttemptTimeout: 700 * time.Millisecond, MaxAttempts: 20})
	r := pay(t, client, context.Background(), s.url, payment)
	require.Equal(t, http.StatusCreated, r.status, r.body)
	require.True(t, r.res.Replayed)
	require.GreaterOrEqual(t, r.res.Attempts, 3)
	require.ErrorIs(t, r.res.History[0].Err, context.DeadlineExceeded)
	require.Equal(t, http.StatusConflict, r.res.History[1].Status)
	require.Equal(t, time.Second, r.res.History[1].Wait, "serve's Retry-After")
	require.Equal(t, payments.Stats{PaymentsCreated: 1, ProviderCharges: 1}, stats(t, s.url))
}

func TestDemoFlaky(t *testing.T) {
	r := runBin(t, 120*time.Second, "demo", "--flaky", "--keys", "120", "--concurrency", "16")
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	count := func(label string) int {
		m := regexp.MustCompile(`(?m)^\s*` + label + `\s+(\d+)`).FindStringSubmatch(r.stdout)
		require.NotNil(t, m, "no %q in\n%s", label, r.stdout)
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		return n
	}
	require.Equal(t, 120, count("payments asked for"))
	require.Equal(t, 120, count("answered 201 Created"))
	require.Equal(t, 0, count("failed"))
	require.Equal(t, 120, count("payments created"))
	require.Equal(t, 120, count("provider charges"))
	require.Greater(t, count("requests at the server"), 120, "it took retries")
	require.Contains(t, r.stdout, "exactly once: PASS (120 payments, 120 charges, ")
	require.Contains(t, r.stdout, fmt.Sprintf("%d retries", count("requests at the server")-120))
}
