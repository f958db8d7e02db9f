package storm

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkey/idemkey/idemclient"
)

// result is one attempt as it came back: the Attempt the history records,
// and what deciding on a retry needs.
type result struct {
	Attempt
	retryAfter string
	err        error
}

// keyRun holds one key (operation), what its copies send and its record in
// the history. What its requests send but the key is shared by all keys
// (runner.base), so that a key keeps no header map of its own: a load run
// keeps every key until its report.
type keyRun struct {
	key     string
	keyVal  [1]string // key, as the key header's values
	body    []byte
	extra   http.Header   // Config.HeaderFor's headers for this key, names canonical; nil without HeaderFor
	host    string        // the Host header's value, if one was given
	gate    chan struct{} // closed once all duplicates were picked up
	arrived atomic.Int64
	copies  atomic.Int64 // copies picked up by a worker (burst mode), for their numbers

	op  *Operation // its record in the history
	run *loadOp    // load mode's figures of the run itself; nil in the burst mode

	mu    sync.Mutex // guards op.Attempts and run
	first [1]Attempt // op.Attempts' first array: most keys of a load run need one attempt
}

// record adds an attempt to k's record and to the history file, now that
// it is known whether the storm sent another attempt after it. The order
// is the same in both, so that the history read back judges the same.
func (r *runner) record(k *keyRun, a *Attempt, retried bool) {
	a.Retried = retried
	k.mu.Lock()
	k.op.Attempts = append(k.op.Attempts, *a)
	r.history.attempt(a)
	k.mu.Unlock()
}

// runner is the state shared by the workers of one storm.
type runner struct {
	cfg         Config
	target      *url.URL
	client      *http.Client
	probeClient *http.Client
	start       time.Time // of the storm

	// transport and probeTransport are the clients' own transports, sent
	// to directly (client.Do would copy every request's header, for
	// redirects storm does not follow), or nil for Config.Client.
	transport, probeTransport http.RoundTripper
	errOp, errURL             string // for url.Error, as client.Do wraps errors

	base      http.Header // the headers every request carries, before the key's own
	keyHeader string      // Config.KeyHeader, canonical

	hist    Header         // the history's header
	ops     []Operation    // the history's operations, one per key (operation), allocated up front
	history *historyWriter // Config.History's writer; nil without one

	attempts     atomic.Int64 // HTTP attempts of the storm finished (responses + errors)
	completed    atomic.Int64 // logical (key, dup) requests finished
	inFlight     atomic.Int64
	retries      atomic.Int64 // the storm's
	probeRetries atomic.Int64
	probing      atomic.Bool
	probed       atomic.Int64 // keys probed
}

// runArm runs one arm of a storm (Run has the rest): the counts read
// (with CountURL), the storm, the late probe (unless NoProbe) and the
// second read, and returns Check's verdict over the history it recorded,
// with Run's errors. cfg.arm starts and ends the arm's incident.
func runArm(ctx context.Context, cfg Config) (*Report, error) {
	cfg, target, err := normalize(cfg)
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, target: target, client: cfg.Client, probeClient: cfg.Client}
	if r.client == nil {
		tr := newTransport(cfg.connections())
		defer tr.CloseIdleConnections()
		r.client = newClient(tr)
		probe := newTransport(cfg.connections())
		probe.DisableKeepAlives = true // a fresh connection for every probe
		r.probeClient = newClient(probe)
		r.transport, r.probeTransport = tr, probe
		r.errOp, r.errURL = cfg.Method[:1]+strings.ToLower(cfg.Method[1:]), redactedURL(target)
	}
	r.base, r.keyHeader = r.baseHeader(), http.CanonicalHeaderKey(cfg.KeyHeader)
	r.hist = Header{Version: HistoryVersion, URL: redactURL(cfg.URL), Method: cfg.Method, Settings: cfg.settings()}
	r.ops = make([]Operation, cfg.Keys)
	var keys []*keyRun
	if !cfg.loadMode() {
		if keys, err = r.keys(); err != nil {
			return nil, err
		}
	} else if err := r.checkHeaderFor(); err != nil {
		return nil, err
	}

	counts := cfg.counts()
	var readings map[string]CountReading
	if len(counts) > 0 {
		before, err := r.readCounts(ctx, counts)
		if err != nil {
			return nil, fmt.Errorf("%w: before the storm: %v", ErrCount, err)
		}
		readings = map[string]CountReading{}
		r.hist.CountsBefore = map[string]int64{}
		for _, c := range counts {
			readings[c.Field] = CountReading{Before: before[c.Field]}
			r.hist.CountsBefore[c.Field] = before[c.Field]
		}
	}

	if cfg.History != nil {
		r.history = newHistoryWriter(cfg.History)
	}
	if cfg.OnStart != nil {
		cfg.OnStart()
	}
	start := time.Now()
	r.start = start
	r.hist.Started = start.UTC()
	r.hist.Faults, r.hist.Events = cfg.arm.faults, cfg.arm.events
	if cfg.arm.begin != nil {
		cfg.arm.begin(start)
	}
	r.history.header(&r.hist)
	var l *loader
	var stopProgress func()
	created := len(keys)
	if cfg.loadMode() {
		l = r.newLoader(start)
		stopProgress = l.startProgress()
		keys = r.load(ctx, start, l)
		created = len(keys)
	} else {
		stopProgress = r.startProgress(start)
		r.storm(ctx, keys)
		for _, k := range keys {
			r.history.operation(k.op, false)
		}
	}
	elapsed := time.Since(start)
	var faults []Fault
	var events []Event
	if cfg.arm.finish != nil {
		faults, events = cfg.arm.finish()
	}
	interrupted := ctx.Err() != nil && (cfg.loadMode() || r.completed.Load() < int64(cfg.Keys*cfg.Dups))
	var probeElapsed time.Duration
	if !cfg.NoProbe && !interrupted {
		r.probing.Store(true)
		probeStart := time.Now()
		r.probe(ctx, keys)
		probeElapsed = time.Since(probeStart)
		interrupted = ctx.Err() != nil
	}
	stopProgress()

	end := &End{Elapsed: elapsed, ProbeElapsed: probeElapsed, Interrupted: interrupted, Faults: faults, Events: events}
	if l != nil && l.err != nil {
		end.Error = l.err.Error()
	}
	if readings != nil && !interrupted && end.Error == "" {
		if !r.settle(ctx, keys) {
			interrupted = true
			end.Interrupted = true
		}
	}
	if readings != nil && !interrupted && end.Error == "" {
		at := time.Since(start)
		after, errs := r.readCountsAfter(ctx, counts)
		for _, c := range counts {
			rd := readings[c.Field]
			if e, failed := errs[c.Field]; failed {
				rd.Error = e
			} else {
				rd.After, rd.Read = after[c.Field], true
			}
			rd.At = at
			readings[c.Field] = rd
		}
	}
	if interrupted || end.Error != "" {
		readings = nil // not read after: the history has only the counts before
	}
	r.history.end(end, readings, counts)
	h := &History{Header: r.hist, Operations: r.ops[:created], End: end, Counts: readings}
	rep, err := Check(h)
	if err != nil {
		return nil, err // cannot happen: the runner's own history
	}
	closeErr := r.history.close()
	if interrupted {
		return rep, ctx.Err()
	}
	if closeErr != nil {
		return rep, fmt.Errorf("%w: writing: %v", ErrHistory, closeErr)
	}
	return rep, nil
}

// redactURL returns raw with its password, if any, replaced by "***".
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		return redactedURL(u)
	}
	return raw
}

// baseHeader returns the headers every request carries, before the key's
// own.
func (r *runner) baseHeader() http.Header {
	base := r.cfg.Header.Clone()
	if base == nil {
		base = http.Header{}
	}
	if base.Get("User-Agent") == "" {
		base.Set("User-Agent", "idemkey-storm")
	}
	return base
}

// keys generates the burst storm's keys and what each sends.
func (r *runner) keys() ([]*keyRun, error) {
	keys := make([]*keyRun, r.cfg.Keys)
	for i := range keys {
		k := &keyRun{}
		if err := r.initKeyRun(k, i); err != nil {
			return nil, err
		}
		k.gate = make(chan struct{})
		keys[i] = k
	}
	return keys, nil
}

// checkHeaderFor checks Config.HeaderFor's headers for the first key, the
// check load mode can make before it starts.
func (r *runner) checkHeaderFor() error {
	if r.cfg.HeaderFor == nil {
		return nil
	}
	if err := checkHeader(r.cfg.HeaderFor("", 0)); err != nil {
		return fmt.Errorf("%w: headers of key 0: %v", ErrInvalidConfig, err)
	}
	return nil
}

// initKeyRun mints the i-th key into k and prepares what its requests
// send. It fails, wrapping ErrInvalidConfig, when Config.HeaderFor returns
// an invalid header.
func (r *runner) initKeyRun(k *keyRun, i int) error {
	cfg := r.cfg
	k.key = cfg.KeyPrefix + newKey()
	k.keyVal[0] = k.key
	k.op = &r.ops[i]
	k.op.Op, k.op.Key, k.op.Attempts = i, k.key, k.first[:0]
	k.body = cfg.Body
	if cfg.BodyFor != nil {
		k.body = cfg.BodyFor(k.key, i)
	}
	k.host = r.base.Get("Host")
	if cfg.HeaderFor != nil {
		extra := cfg.HeaderFor(k.key, i)
		if err := checkHeader(extra); err != nil {
			return fmt.Errorf("%w: headers of key %d: %v", ErrInvalidConfig, i, err)
		}
		k.extra = make(http.Header, len(extra))
		for name, values := range extra {
			k.extra[http.CanonicalHeaderKey(name)] = values
		}
		if _, ok := k.extra["Host"]; ok {
			k.host = k.extra.Get("Host")
		}
	}
	return nil
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

// newTransport returns a keep-alive transport sized for n workers, with at
// most n connections per host: an attempt that finds none idle waits for one
// rather than dialing past what the pool keeps (a dial that lost the race to
// a returning connection would outlive its attempt, and the pool would close
// the extra connection, leaving a socket in TIME-WAIT).
func newTransport(n int) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = n
	tr.MaxIdleConnsPerHost = n
	tr.MaxConnsPerHost = n
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
				copyN := int(k.copies.Add(1)) - 1
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
				if r.request(ctx, k, copyN, false) {
					r.completed.Add(1)
				}
			}
		})
	}
	wg.Wait()
}

// probeable reports whether a key is worth the late probe: it has a final
// answer and has not failed. The probe could not change the class of the
// others, and a broken server would only run them once more.
func probeable(op *Operation) bool {
	kv := judgeKey(op)
	return kv.class == classPassed || kv.unproven
}

// probe sends one more duplicate for every key worth it (probeable), now
// that the storm is over, from a client that does not reuse the storm's
// connections.
func (r *runner) probe(ctx context.Context, keys []*keyRun) {
	jobs := make(chan *keyRun)
	go func() {
		defer close(jobs)
		for _, k := range keys {
			k.mu.Lock()
			ok := probeable(k.op)
			k.mu.Unlock()
			if !ok {
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
					r.request(ctx, k, 0, true)
					r.probed.Add(1)
				}
			}
		})
	}
	wg.Wait()
}

// request performs one logical request for k, copy number copyN, and,
// with Config.Retry, asks again while the answer is not final (see
// retry.go), within Config.Timeout. Each attempt is recorded once it is
// known whether another one followed it. It reports whether it ran to
// completion, i.e. ctx was not cancelled.
func (r *runner) request(ctx context.Context, k *keyRun, copyN int, probe bool) bool {
	deadline := time.Now().Add(r.cfg.Timeout)
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var prev result
	for n := 0; ; n++ {
		if n > 0 {
			r.record(k, &prev.Attempt, true)
		}
		a, ok := r.send(ctx, rctx, k, probe)
		a.Copy, a.Attempt.Attempt = copyN, n+1
		if !ok {
			r.record(k, &a.Attempt, false) // interrupted in flight
			return false
		}
		if !probe {
			r.attempts.Add(1)
		}
		if !r.cfg.Retry || !retryable(a.Status, a.Replayed, a.err) || n >= r.cfg.MaxRetries {
			r.record(k, &a.Attempt, false)
			return true
		}
		wait := retryDelay(a.retryAfter, n, time.Now())
		if time.Until(deadline) <= wait {
			r.record(k, &a.Attempt, false)
			return true // no time left for another attempt
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			r.record(k, &a.Attempt, false)
			return false
		}
		if probe {
			r.probeRetries.Add(1)
		} else {
			r.retries.Add(1)
		}
		prev = a
	}
}
