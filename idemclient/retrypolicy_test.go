package idemclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// t0 is the fake clock's start in the arithmetic tests: every time is
// passed to the policy, so no test waits.
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func newPolicy(t *testing.T, name string, o RetryOptions) *RetryPolicy {
	t.Helper()
	p, err := NewRetryPolicy(name, o)
	require.NoError(t, err)
	return p
}

// retriesAllowed asks p for retries of host at now until it refuses one,
// and returns how many it allowed (at most limit) and why it stopped.
func retriesAllowed(p *RetryPolicy, host string, now time.Time, limit int) (int, Stop) {
	for n := range limit {
		if stop := p.Allow(host, 2, now); stop != "" {
			return n, stop
		}
	}
	return limit, ""
}

func TestRetryPolicyNamesAreTheFlagsValues(t *testing.T) {
	require.Equal(t, []string{"backoff", "naive", "budget", "token-bucket", "adaptive"}, RetryPolicyNames())
	names := RetryPolicyNames()
	names[0] = "changed"
	require.Equal(t, "backoff", RetryPolicyNames()[0], "each call returns a new slice")
	for _, name := range RetryPolicyNames() {
		p := newPolicy(t, name, RetryOptions{})
		require.Equal(t, name, p.Name())
		require.Equal(t, name, p.String())
	}
	for _, name := range []string{"", "Budget", "token_bucket", "exponential"} {
		_, err := NewRetryPolicy(name, RetryOptions{})
		require.ErrorIs(t, err, ErrUnknownRetryPolicy, name)
		require.ErrorContains(t, err, "backoff, naive, budget, token-bucket, adaptive")
	}
	_, err := NewRetryPolicy("budget", RetryOptions{Policy: Policy{BaseDelay: -time.Second}})
	require.ErrorContains(t, err, "must not be negative")
}

func TestNaiveRetriesAtOnceBackoffWaitsAsPolicy(t *testing.T) {
	waits := Policy{BaseDelay: 100 * time.Millisecond, Rand: func() float64 { return 0.5 }}
	naive := newPolicy(t, RetryNaive, RetryOptions{Policy: waits})
	for retry := 1; retry <= 5; retry++ {
		require.Zero(t, naive.Delay(retry, "", t0))
		require.Zero(t, naive.Delay(retry, "30", t0), "naive does not wait for Retry-After either")
	}
	for _, name := range []string{RetryBackoff, RetryBudget, RetryTokenBucket, RetryAdaptive} {
		p := newPolicy(t, name, RetryOptions{Policy: waits})
		for retry := 1; retry <= 5; retry++ {
			require.Equal(t, waits.Delay(retry, "", t0), p.Delay(retry, "", t0), name)
		}
		require.Equal(t, 3*time.Second, p.Delay(1, "3", t0), name)
	}
	// backoff and naive refuse nothing.
	for _, p := range []*RetryPolicy{naive, newPolicy(t, RetryBackoff, RetryOptions{})} {
		n, stop := retriesAllowed(p, "api:443", t0, 100_000)
		require.Equal(t, 100_000, n)
		require.Empty(t, stop)
	}
}

func TestBudgetAllowsTwentyPercentOfTheWindowsRequestsPlusTenASecond(t *testing.T) {
	p := newPolicy(t, RetryBudget, RetryOptions{})
	// No request yet: the floor alone, 10 a second over the 10 s window.
	n, stop := retriesAllowed(p, "api:443", t0, 1000)
	require.Equal(t, 100, n)
	require.Equal(t, StopBudget, stop)

	// First attempts always pass; every five requests earn one retry.
	for range 4 {
		require.Empty(t, p.Allow("api:443", 1, t0))
	}
	n, _ = retriesAllowed(p, "api:443", t0, 1000)
	require.Zero(t, n, "four requests are 0.8 of a retry")
	require.Empty(t, p.Allow("api:443", 1, t0))
	n, _ = retriesAllowed(p, "api:443", t0, 1000)
	require.Equal(t, 1, n, "the fifth makes one")
	for range 500 {
		require.Empty(t, p.Allow("api:443", 1, t0.Add(3*time.Second)))
	}
	n, _ = retriesAllowed(p, "api:443", t0.Add(3*time.Second), 1000)
	require.Equal(t, 100, n, "500 more requests, 100 more retries")

	// What happened at t0 counts until 10 s later: at t0+9.999s the
	// window still holds it; at t0+10s its second is out (the 101 retries
	// and 5 requests of t0 go; the 500 requests and 100 retries of t0+3s
	// stay, and allow 0.2·500 + 100 = 200 retries: 100 more).
	n, _ = retriesAllowed(p, "api:443", t0.Add(10*time.Second-time.Millisecond), 1000)
	require.Zero(t, n)
	n, _ = retriesAllowed(p, "api:443", t0.Add(10*time.Second), 1000)
	require.Equal(t, 100, n)
	// At t0+13s the requests of t0+3s are out, and the floor's 100 are
	// spent by the retries of t0+10s; at t0+20s those are out too.
	n, _ = retriesAllowed(p, "api:443", t0.Add(13*time.Second), 1000)
	require.Zero(t, n)
	n, _ = retriesAllowed(p, "api:443", t0.Add(20*time.Second), 1000)
	require.Equal(t, 100, n)
	// Long after, nothing is left of any of it.
	n, _ = retriesAllowed(p, "api:443", t0.Add(time.Hour), 1000)
	require.Equal(t, 100, n)

	// Under a lasting outage at a steady rate, retries hold at 20 % of
	// the requests plus 10 a second: 100 requests a second for 60 s,
	// every one wanting 3 retries.
	p = newPolicy(t, RetryBudget, RetryOptions{})
	retries := 0
	for ms := range 60_000 / 10 {
		now := t0.Add(time.Duration(ms) * 10 * time.Millisecond)
		require.Empty(t, p.Allow("api:443", 1, now))
		for retry := 2; retry <= 4; retry++ {
			if p.Allow("api:443", retry, now) != "" {
				break
			}
			if now.Sub(t0) >= 10*time.Second {
				retries++ // counted once the window is full
			}
		}
	}
	require.InDelta(t, (0.2*100+10)*50, retries, 30, "30 retries a second for the last 50 s")
}

func TestTokenBucketSpendsOnePerRetryAndEarnsATenthPerAcceptedAttempt(t *testing.T) {
	p := newPolicy(t, RetryTokenBucket, RetryOptions{})
	n, stop := retriesAllowed(p, "api:443", t0, 1000)
	require.Equal(t, 100, n, "a bucket starts with 100 tokens")
	require.Equal(t, StopBudget, stop)
	require.Empty(t, p.Allow("api:443", 1, t0), "first attempts always pass")

	for range 9 {
		p.Done("api:443", true, t0)
	}
	for range 100 {
		p.Done("api:443", false, t0) // failures earn nothing
	}
	n, _ = retriesAllowed(p, "api:443", t0, 1000)
	require.Zero(t, n, "nine tenths of a token")
	p.Done("api:443", true, t0)
	n, _ = retriesAllowed(p, "api:443", t0, 1000)
	require.Equal(t, 1, n, "the tenth deposit makes exactly one token")

	// Time alone refills nothing; deposits stop at 100 tokens.
	n, _ = retriesAllowed(p, "api:443", t0.Add(time.Hour), 1000)
	require.Zero(t, n)
	for range 5000 {
		p.Done("api:443", true, t0)
	}
	n, _ = retriesAllowed(p, "api:443", t0, 1000)
	require.Equal(t, 100, n)
}

func TestAdaptiveRejectsWithTheSREBookProbability(t *testing.T) {
	draw := 0.0
	p := newPolicy(t, RetryAdaptive, RetryOptions{Rand: func() float64 { return draw }})
	// An empty history rejects nothing, even a draw of 0.
	require.Empty(t, p.Allow("api:443", 1, t0))
	p.Done("api:443", true, t0)
	// 1 request, 1 accept: (1 − 2)/2 < 0, nothing rejected.
	require.Empty(t, p.Allow("api:443", 1, t0))
	// 2 requests, 1 accept: (2 − 2)/3 = 0.
	require.Empty(t, p.Allow("api:443", 2, t0))
	// 3 requests, 1 accept: (3 − 2)/4 = 0.25: a draw below it rejects,
	// one at it passes.
	draw = 0.2499
	require.Equal(t, StopThrottled, p.Allow("api:443", 1, t0))
	// The rejected attempt counted as a request: 4, 1 → (4 − 2)/5 = 0.4.
	draw = 0.4
	require.Empty(t, p.Allow("api:443", 1, t0))
	// 5, 1 → 3/6 = 0.5.
	draw = 0.4999
	require.Equal(t, StopThrottled, p.Allow("api:443", 2, t0), "retries are throttled alike")
	// Accepts open it again: 6 requests, 3 accepts → 0.
	p.Done("api:443", true, t0)
	p.Done("api:443", true, t0)
	draw = 0
	require.Empty(t, p.Allow("api:443", 1, t0))

	// A backend that accepts nothing: the share rejected tends to 1, and
	// a request in ten or so still goes through to see if it is back.
	p = newPolicy(t, RetryAdaptive, RetryOptions{})
	sent := 0
	for i := range 10_000 {
		if p.Allow("api:443", 1, t0.Add(time.Duration(i)*time.Millisecond)) == "" {
			sent++
		}
	}
	require.Less(t, sent, 100, "rejection probability n/(n+1)")

	// The history is the last 2 minutes: at t0+2m the first seconds have
	// gone, and once all of it has gone nothing is rejected.
	draw = 0
	p = newPolicy(t, RetryAdaptive, RetryOptions{Rand: func() float64 { return draw }})
	for range 10 {
		p.Allow("api:443", 1, t0)
	}
	require.Equal(t, StopThrottled, p.Allow("api:443", 1, t0.Add(2*time.Minute-time.Second)))
	require.Empty(t, p.Allow("api:443", 1, t0.Add(4*time.Minute)))
}

func TestRetryPolicyKeepsEachHostApartAndBoundsThem(t *testing.T) {
	p := newPolicy(t, RetryBudget, RetryOptions{})
	n, _ := retriesAllowed(p, "down.example:443", t0, 1000)
	require.Equal(t, 100, n)
	n, _ = retriesAllowed(p, "up.example:443", t0, 1000)
	require.Equal(t, 100, n, "a failing host does not spend a healthy one's retries")
	n, _ = retriesAllowed(p, "DOWN.example:443", t0, 1000)
	require.Zero(t, n, "host names are case folded")

	for i := range 5000 {
		p.Allow(fmt.Sprintf("h%d:80", i), 2, t0.Add(time.Duration(i)))
		require.LessOrEqual(t, len(p.hosts), retryMaxHosts)
	}
	// The host used last is kept, the one unused longest forgotten.
	_, kept := p.hosts["h4999:80"]
	require.True(t, kept)
	_, kept = p.hosts["down.example:443"]
	require.False(t, kept)
}

func TestRetryPolicyWindowsCountAClockThatGoesBackInTheNewestSecond(t *testing.T) {
	p := newPolicy(t, RetryBudget, RetryOptions{})
	n, _ := retriesAllowed(p, "api:443", t0.Add(5*time.Second), 1000)
	require.Equal(t, 100, n)
	n, _ = retriesAllowed(p, "api:443", t0, 1000)
	require.Zero(t, n, "an earlier time counts in the same window, not a fresh one")
	n, _ = retriesAllowed(p, "api:443", t0.Add(15*time.Second), 1000)
	require.Equal(t, 100, n, "and leaves it with the newest second")
}

// The Transport retries as its RetryPolicy says: naive at once and without
// a budget, up to MaxAttempts.
func TestTransportNaiveRetriesAtOnceUpToMaxAttempts(t *testing.T) {
	a := newApp()
	a.before = func(w http.ResponseWriter, r *http.Request, n int) bool {
		return statusOnce(http.StatusServiceUnavailable, "Retry-After", "5")(w, r, 1)
	}
	s := newServer(t, a)
	tr, c := newTransport(t, Options{RetryPolicy: newPolicy(t, RetryNaive, RetryOptions{}), MaxAttempts: 4})
	for range 50 { // far past what the default Budget would allow
		r := mustCall(t, tr, newRequest(t, http.MethodPost, s.URL, payment))
		require.Equal(t, http.StatusServiceUnavailable, r.status)
		require.Equal(t, 4, r.res.Attempts)
		require.Equal(t, StopAttempts, r.res.Stop)
		require.Zero(t, r.res.Waited)
	}
	for _, d := range c.Slept() {
		require.Zero(t, d)
	}
	require.Nil(t, tr.budget, "no Budget beside a RetryPolicy")
}

// A budget shared by a Transport's requests: against a server that fails
// everything, on a clock that stands still, the retries are exactly the
// floor plus a fifth of the requests.
func TestTransportBudgetBoundsRetriesUnderAnOutage(t *testing.T) {
	var served atomic.Int64
	s := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	tr, c := newTransport(t, Options{RetryPolicy: newPolicy(t, RetryBudget, RetryOptions{}), MaxAttempts: 4})
	c.onSleep = func(d time.Duration) { c.Advance(-d) } // the clock stands still
	const requests = 200
	budgeted := 0
	for range requests {
		r := mustCall(t, tr, newRequest(t, http.MethodPost, s.URL, payment))
		require.Equal(t, http.StatusServiceUnavailable, r.status)
		if r.res.Stop == StopBudget {
			budgeted++
		}
	}
	require.EqualValues(t, requests+100+requests/5, served.Load(), "the requests, the floor's 100 retries and one per five requests")
	require.Greater(t, budgeted, requests/2)
}

// token-bucket through a Transport: retries drain the bucket, accepted
// answers refill it by a tenth.
func TestTransportTokenBucketRefillsFromAcceptedAnswers(t *testing.T) {
	s := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if strings.HasSuffix(r.URL.Path, "/fail") {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	tr, _ := newTransport(t, Options{RetryPolicy: newPolicy(t, RetryTokenBucket, RetryOptions{}), MaxAttempts: 2})
	for range 100 {
		require.Equal(t, 2, mustCall(t, tr, newRequest(t, http.MethodPost, s.URL+"/fail", payment)).res.Attempts)
	}
	r := mustCall(t, tr, newRequest(t, http.MethodPost, s.URL+"/fail", payment))
	require.Equal(t, 1, r.res.Attempts)
	require.Equal(t, StopBudget, r.res.Stop)
	for range 10 {
		require.Equal(t, http.StatusCreated, mustCall(t, tr, newRequest(t, http.MethodPost, s.URL+"/ok", payment)).status)
	}
	require.Equal(t, 2, mustCall(t, tr, newRequest(t, http.MethodPost, s.URL+"/fail", payment)).res.Attempts, "ten answers, one token")
}

// adaptive rejects a first attempt locally: nothing is sent, the body is
// closed, and the error says why.
func TestTransportAdaptiveRejectsAFirstAttemptWithoutSendingIt(t *testing.T) {
	var served atomic.Int64
	s := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	rp := newPolicy(t, RetryAdaptive, RetryOptions{Rand: func() float64 { return 0 }})
	tr, _ := newTransport(t, Options{RetryPolicy: rp, MaxAttempts: 1})
	r := mustCall(t, tr, newRequest(t, http.MethodPost, s.URL, payment))
	require.Equal(t, http.StatusServiceUnavailable, r.status)

	body := &closeCounter{Reader: strings.NewReader(payment)}
	req, err := http.NewRequest(http.MethodPost, s.URL, body)
	require.NoError(t, err)
	_, err = tr.RoundTrip(req)
	require.ErrorIs(t, err, ErrThrottled)
	var e *Error
	require.True(t, errors.As(err, &e))
	require.Equal(t, StopThrottled, e.Result.Stop)
	require.Zero(t, e.Result.Attempts)
	require.EqualValues(t, 1, body.closed.Load(), "the RoundTripper closes the body it was given")
	require.EqualValues(t, 1, served.Load())
}

func TestTransportRefusesARetryPolicyBesideAPolicyOrABudget(t *testing.T) {
	rp := newPolicy(t, RetryBudget, RetryOptions{})
	_, err := New(nil, Options{RetryPolicy: rp, Policy: Policy{BaseDelay: time.Second}})
	require.ErrorContains(t, err, "not both")
	_, err = New(nil, Options{RetryPolicy: rp, Policy: Policy{Rand: func() float64 { return 0 }}})
	require.ErrorContains(t, err, "not both")
	b, _ := NewBudget(BudgetOptions{})
	_, err = New(nil, Options{RetryPolicy: rp, Budget: b})
	require.ErrorContains(t, err, "not both")
	tr, err := New(nil, Options{RetryPolicy: rp, NoBudget: true})
	require.NoError(t, err)
	require.Same(t, rp, tr.Options().RetryPolicy)
}

// A request's context deadline is checked before the policy is asked, so
// a retry that will not be made spends nothing.
func TestTransportSpendsNoRetryItWillNotMake(t *testing.T) {
	s := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "10")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	rp := newPolicy(t, RetryTokenBucket, RetryOptions{})
	tr, c := newTransport(t, Options{RetryPolicy: rp, MaxAttempts: 4})
	ctx, cancel := context.WithDeadline(context.Background(), c.Now().Add(5*time.Second))
	defer cancel()
	for range 150 {
		req := newRequest(t, http.MethodPost, s.URL, payment).WithContext(ctx)
		r := mustCall(t, tr, req)
		require.Equal(t, StopDeadline, r.res.Stop)
	}
	n, _ := retriesAllowed(rp, strings.TrimPrefix(s.URL, "http://"), c.Now(), 1000)
	require.Equal(t, 100, n, "the bucket is still full")
}
