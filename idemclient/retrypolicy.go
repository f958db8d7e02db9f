package idemclient

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// The names of the retry policies: what NewRetryPolicy takes, and what
// idemkey storm's --retry-policy flag lists. They are a public contract.
const (
	// RetryBackoff waits between attempts as Policy.Delay says (the
	// server's Retry-After, else exponential backoff with full jitter) and
	// refuses no retry: the default.
	RetryBackoff = "backoff"
	// RetryNaive retries at once, without waiting and without a limit but
	// the caller's count of attempts: what a retry loop written in a hurry
	// does, and the one that turns a slowdown into a storm.
	RetryNaive = "naive"
	// RetryBudget waits as backoff does, and allows a retry while the
	// retries of the last 10 seconds stay within 20 % of the requests of
	// those 10 seconds plus 10 a second (Finagle's RetryBudget).
	RetryBudget = "budget"
	// RetryTokenBucket waits as backoff does, and spends a token on each
	// retry from a bucket of 100 that each accepted attempt refills by a
	// tenth of a token; no retry below one token (the AWS SDKs' retry
	// quota, Marc Brooker's token bucket).
	RetryTokenBucket = "token-bucket"
	// RetryAdaptive waits as backoff does, and rejects attempts locally,
	// first attempts and retries alike, with the probability
	// max(0, (requests − 2·accepts) / (requests + 1)) over the last 2
	// minutes (client-side throttling, from Google's SRE book).
	RetryAdaptive = "adaptive"
)

// RetryPolicyNames returns the names NewRetryPolicy accepts, the default
// (RetryBackoff) first, in a new slice.
func RetryPolicyNames() []string {
	return []string{RetryBackoff, RetryNaive, RetryBudget, RetryTokenBucket, RetryAdaptive}
}

// ErrUnknownRetryPolicy is returned (wrapped, with the names known) by
// NewRetryPolicy for a name it does not know.
var ErrUnknownRetryPolicy = errors.New("idemclient: unknown retry policy")

// ErrThrottled is the cause of the *Error a Transport returns when its
// RetryPolicy (adaptive) rejected a request's first attempt locally:
// nothing was sent.
var ErrThrottled = errors.New("idemclient: request rejected locally by the adaptive retry policy (client-side throttling)")

// The arithmetic of the policies. The figures are the ones their sources
// publish; see each policy's name constant.
const (
	// budget: retries of the window ≤ budgetPercent % of its requests
	// + budgetFloor a second.
	budgetWindow  = 10 // seconds
	budgetPercent = 20
	budgetFloor   = 10 // retries a second

	// token-bucket, in tenths of a token so that ten deposits make
	// exactly one token.
	bucketMax     = 1000 // 100 tokens, where a bucket starts
	bucketDeposit = 1    // 0.1 token per accepted attempt
	bucketRetry   = 10   // 1 token per retry

	// adaptive: the SRE book's K (a client lets through up to K times
	// the requests the backend accepts) and its window.
	adaptiveK      = 2
	adaptiveWindow = 120 // seconds

	// retryMaxHosts bounds the hosts a RetryPolicy keeps state for.
	retryMaxHosts = 1024
)

// RetryOptions configures a RetryPolicy; the zero value gives the defaults.
type RetryOptions struct {
	// Policy says how long backoff, budget, token-bucket and adaptive wait
	// before a retry (naive never waits): see Policy.Delay.
	// Default: the zero Policy (Retry-After within 30s, else backoff from
	// 100ms to 10s with full jitter).
	Policy Policy

	// Rand returns a uniformly distributed number in [0, 1) for adaptive's
	// draws: an attempt is rejected when the draw is below the probability
	// of rejection. It is called with the RetryPolicy's lock held.
	// Default: math/rand/v2's Float64.
	Rand func() float64
}

// RetryPolicy is a retry policy chosen by name (see RetryPolicyNames): how
// long to wait before a retry (Delay), and whether an attempt may be sent
// at all (Allow), given the attempts this policy has seen and how they
// ended (Done). Policy alone is the stateless rules that every named
// policy but naive waits by; a RetryPolicy adds what needs a memory: a
// retry budget, a token bucket, a throttle. It is what
// Options.RetryPolicy puts in a Transport, and what idemkey storm's
// simulated clients retry by, so the policy that held up in a storm is the
// one a client ships:
//
//	rp, err := idemclient.NewRetryPolicy("budget", idemclient.RetryOptions{})
//	t, err := idemclient.New(nil, idemclient.Options{RetryPolicy: rp})
//
// A retry loop of its own calls, for every attempt n (1 for the first):
// Allow(host, n, now) before sending it (for a retry, after deciding to
// retry and before waiting), and gives up if it returns a Stop; then
// Done(host, accepted, now) once the attempt has ended; and
// Delay(n, retryAfter, now) for the wait before attempt n+1.
//
// The state is kept per host (the Transport passes the request URL's
// host:port, case folded), so a failing host does not spend the retries of
// a healthy one; past 1024 hosts, the one unused longest is forgotten (a
// host seen again starts afresh). Every caller that shares a RetryPolicy
// shares its budget, bucket and throttle: share one between the Transports
// of a process to give the process one budget, as the SDKs these policies
// come from do. The windows of budget and adaptive are kept in one-second
// slots on the clock the caller passes (now), so they slide a second at a
// time; a clock that goes back counts in the newest slot.
//
// A RetryPolicy is safe for concurrent use; its methods take one lock.
type RetryPolicy struct {
	name  string
	waits Policy
	rand  func() float64

	mu    sync.Mutex
	hosts map[string]*retryHost
}

// retryHost is a RetryPolicy's memory of one host.
type retryHost struct {
	epoch  time.Time // the start of the window's second 0
	used   time.Time // last call, for eviction
	win    window    // budget: requests, retries; adaptive: requests, accepts
	tenths int       // token-bucket: tenths of a token
}

// NewRetryPolicy returns a fresh RetryPolicy of the given name (one of
// RetryPolicyNames), configured by o, with no memory yet: a budget and a
// bucket start full, a throttle open. It returns an error wrapping
// ErrUnknownRetryPolicy for any other name, and an error for negative
// delays in o.Policy.
func NewRetryPolicy(name string, o RetryOptions) (*RetryPolicy, error) {
	switch name {
	case RetryBackoff, RetryNaive, RetryBudget, RetryTokenBucket, RetryAdaptive:
	default:
		return nil, fmt.Errorf("%w %q (want one of %s)", ErrUnknownRetryPolicy, name, strings.Join(RetryPolicyNames(), ", "))
	}
	if o.Policy.BaseDelay < 0 || o.Policy.MaxDelay < 0 || o.Policy.MaxRetryAfter < 0 {
		return nil, errors.New("idemclient: RetryOptions.Policy delays must not be negative")
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	return &RetryPolicy{name: name, waits: o.Policy, rand: o.Rand, hosts: make(map[string]*retryHost)}, nil
}

// Name returns the policy's name, as given to NewRetryPolicy.
func (p *RetryPolicy) Name() string { return p.name }

// String returns the policy's name.
func (p *RetryPolicy) String() string { return p.name }

// Allow reports whether attempt number attempt (1 for a request's first,
// 2 for its first retry, …) of a request to host may be sent at time now,
// and counts it: it returns "" if it may, and otherwise why not —
// StopBudget when budget or token-bucket has no retry left for host (first
// attempts always pass: they are what a budget is a share of), or
// StopThrottled when adaptive rejected the attempt locally. Call it once
// per attempt, just before sending it, or for a retry once its wait has
// been decided on and before waiting; a retry that Allow passed but the
// caller then did not send is counted all the same.
func (p *RetryPolicy) Allow(host string, attempt int, now time.Time) Stop {
	if p.name == RetryBackoff || p.name == RetryNaive {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	h, sec := p.host(host, now)
	switch p.name {
	case RetryBudget:
		requests, retries := h.win.sum[0], h.win.sum[1]
		if attempt <= 1 {
			h.win.add(sec, 0)
			return ""
		}
		// Integers, so that 20 % of 5 requests is exactly one retry.
		if (retries+1)*100 > requests*budgetPercent+budgetFloor*budgetWindow*100 {
			return StopBudget
		}
		h.win.add(sec, 1)
	case RetryTokenBucket:
		if attempt <= 1 {
			return ""
		}
		if h.tenths < bucketRetry {
			return StopBudget
		}
		h.tenths -= bucketRetry
	case RetryAdaptive:
		requests, accepts := h.win.sum[0], h.win.sum[1]
		h.win.add(sec, 0) // a rejected attempt counts as a request: that is what closes the throttle
		if reject := float64(requests-adaptiveK*accepts) / float64(requests+1); reject > 0 && p.rand() < reject {
			return StopThrottled
		}
	}
	return ""
}

// Done records how an attempt to host that Allow passed ended, at time
// now: accepted is true when the server answered with something not
// worth retrying (a final answer, a replay included), false for a
// retryable status (409, 429, 5xx), a transport error, or an attempt
// given up on. token-bucket deposits a tenth of a token for an accepted
// attempt; adaptive counts it as accepted; the other policies ignore it.
func (p *RetryPolicy) Done(host string, accepted bool, now time.Time) {
	if !accepted || (p.name != RetryTokenBucket && p.name != RetryAdaptive) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	h, sec := p.host(host, now)
	if p.name == RetryTokenBucket {
		h.tenths = min(bucketMax, h.tenths+bucketDeposit)
		return
	}
	h.win.add(sec, 1)
}

// Delay returns the wait before retry number retry (1 for the first) after
// an answer whose Retry-After header value is retryAfter ("" for none),
// at time now: 0 for naive, which retries at once whatever the server
// asked; otherwise RetryOptions.Policy's Delay.
func (p *RetryPolicy) Delay(retry int, retryAfter string, now time.Time) time.Duration {
	if p.name == RetryNaive {
		return 0
	}
	return p.waits.Delay(retry, retryAfter, now)
}

// host returns the memory of host, brought to now, and the second of the
// window that now falls in. p.mu must be held.
func (p *RetryPolicy) host(host string, now time.Time) (*retryHost, int64) {
	key := hostKey(host)
	h, ok := p.hosts[key]
	if !ok {
		if len(p.hosts) >= retryMaxHosts {
			p.evict()
		}
		h = &retryHost{epoch: now, tenths: bucketMax}
		switch p.name {
		case RetryBudget:
			h.win = newWindow(budgetWindow)
		case RetryAdaptive:
			h.win = newWindow(adaptiveWindow)
		}
		p.hosts[key] = h
	}
	if now.After(h.used) {
		h.used = now
	}
	sec := int64(0)
	if d := now.Sub(h.epoch); d > 0 {
		sec = int64(d / time.Second)
	}
	if h.win.slots != nil {
		sec = h.win.advance(sec)
	}
	return h, sec
}

// evict forgets the host used longest ago. p.mu must be held.
func (p *RetryPolicy) evict() {
	var oldest string
	var at time.Time
	for k, h := range p.hosts {
		if oldest == "" || h.used.Before(at) {
			oldest, at = k, h.used
		}
	}
	delete(p.hosts, oldest)
}

// window counts two things over the last len(slots) seconds, in
// one-second slots: sum is the total of the slots.
type window struct {
	slots [][2]int64
	head  int64 // the second the newest slot counts
	sum   [2]int64
}

func newWindow(seconds int) window { return window{slots: make([][2]int64, seconds)} }

// advance moves the window on to second sec, emptying the slots of the
// seconds that fell out of it, and returns the second to count in: sec, or
// the newest slot's if sec is older (a clock that went back).
func (w *window) advance(sec int64) int64 {
	if sec <= w.head {
		return w.head
	}
	n := int64(len(w.slots))
	for s := w.head + 1; s <= sec && s <= w.head+n; s++ {
		slot := &w.slots[s%n]
		w.sum[0] -= slot[0]
		w.sum[1] -= slot[1]
		*slot = [2]int64{}
	}
	w.head = sec
	return sec
}

// add counts one of thing i (0 or 1) in second sec, the window's head.
func (w *window) add(sec int64, i int) {
	w.slots[sec%int64(len(w.slots))][i]++
	w.sum[i]++
}
