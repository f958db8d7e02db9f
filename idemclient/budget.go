package idemclient

import (
	"errors"
	"math"
	"strings"
	"sync"
	"time"
)

// Budget defaults, applied where a BudgetOptions field is zero.
const (
	// defaultBudgetBurst is the default BudgetOptions.Burst.
	defaultBudgetBurst = 10
	// defaultBudgetRatio is the default BudgetOptions.Ratio.
	defaultBudgetRatio = 0.2
	// defaultBudgetPerSecond is the default BudgetOptions.PerSecond.
	defaultBudgetPerSecond = 1
	// defaultBudgetMaxHosts is the default BudgetOptions.MaxHosts.
	defaultBudgetMaxHosts = 1024
)

// BudgetOptions configures a Budget; the zero value gives the defaults.
type BudgetOptions struct {
	// Burst is the most tokens a host's bucket holds, and what a new bucket
	// starts with: the retries a host may take at once after a quiet
	// spell. Default: 10.
	Burst float64

	// Ratio is the tokens each request to the host adds (once, before its
	// first attempt). Each retry takes one token, so under a lasting outage
	// retries add at most Ratio to the host's load: a fleet of clients
	// cannot turn an outage into a storm. Default: 0.2.
	Ratio float64

	// PerSecond is the tokens a host's bucket gains each second, so that a
	// client that sends few requests may still retry them.
	// Default: 1.
	PerSecond float64

	// MaxHosts bounds the hosts tracked. Past it, full buckets are dropped
	// (a full bucket is what a new one would be), then any.
	// Default: 1024.
	MaxHosts int
}

// Budget is a retry budget per host: a token bucket for each host (the
// URL's host:port), filled by the requests sent to it (BudgetOptions.Ratio
// per request) and by time (BudgetOptions.PerSecond), and drained by one
// token per retry. When a host's bucket holds less than one token the
// Transport does not retry a request to it and returns the answer it has,
// with Result.Stop set to StopBudget. While most requests fail, retries are
// held to that ratio; once requests succeed again, or time passes, the
// bucket refills and retries resume.
//
// Share one Budget between Transports to give them one budget. A Budget is
// safe for concurrent use.
type Budget struct {
	o     BudgetOptions
	mu    sync.Mutex
	hosts map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time // when tokens was last brought up to date
}

// NewBudget returns a Budget configured by o. It returns an error if a
// field of o is negative, NaN or infinite.
func NewBudget(o BudgetOptions) (*Budget, error) {
	for _, f := range []float64{o.Burst, o.Ratio, o.PerSecond} {
		if f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, errors.New("idemclient: BudgetOptions.Burst, Ratio and PerSecond must be finite and not negative")
		}
	}
	if o.MaxHosts < 0 {
		return nil, errors.New("idemclient: BudgetOptions.MaxHosts must not be negative")
	}
	if o.Burst == 0 {
		o.Burst = defaultBudgetBurst
	}
	if o.Ratio == 0 {
		o.Ratio = defaultBudgetRatio
	}
	if o.PerSecond == 0 {
		o.PerSecond = defaultBudgetPerSecond
	}
	if o.MaxHosts == 0 {
		o.MaxHosts = defaultBudgetMaxHosts
	}
	return &Budget{o: o, hosts: make(map[string]*bucket)}, nil
}

// Options returns the options in effect, defaults applied.
func (b *Budget) Options() BudgetOptions { return b.o }

// Tokens returns the tokens in host's bucket at time now: the retries it
// would allow right now, rounded down. A host never seen has a full bucket.
func (b *Budget) Tokens(host string, now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.bucket(hostKey(host), now)
	return k.tokens
}

// deposit adds the share of one request to host's bucket.
func (b *Budget) deposit(host string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.bucket(hostKey(host), now)
	k.tokens = min(b.o.Burst, k.tokens+b.o.Ratio)
}

// withdraw takes one token from host's bucket if it holds one, and reports
// whether it did.
func (b *Budget) withdraw(host string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.bucket(hostKey(host), now)
	if k.tokens < 1 {
		return false
	}
	k.tokens--
	return true
}

// bucket returns host's bucket brought up to now, creating it if needed.
// b.mu must be held.
func (b *Budget) bucket(host string, now time.Time) *bucket {
	k, ok := b.hosts[host]
	if !ok {
		if len(b.hosts) >= b.o.MaxHosts {
			b.evict(now)
		}
		k = &bucket{tokens: b.o.Burst, at: now}
		b.hosts[host] = k
		return k
	}
	if dt := now.Sub(k.at); dt > 0 {
		k.tokens = min(b.o.Burst, k.tokens+dt.Seconds()*b.o.PerSecond)
		k.at = now
	}
	return k
}

// evict makes room for one more host. b.mu must be held.
func (b *Budget) evict(now time.Time) {
	for h, k := range b.hosts {
		if k.tokens+now.Sub(k.at).Seconds()*b.o.PerSecond >= b.o.Burst {
			delete(b.hosts, h)
		}
	}
	for h := range b.hosts {
		if len(b.hosts) < b.o.MaxHosts {
			return
		}
		delete(b.hosts, h)
	}
}

func hostKey(h string) string { return strings.ToLower(h) }
