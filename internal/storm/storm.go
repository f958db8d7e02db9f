package storm

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	headerIdempotencyKey = "Idempotency-Key"
	headerReplayed       = "Idempotent-Replayed"

	defaultKeys        = 100
	defaultDups        = 10
	defaultConcurrency = 64
	defaultTimeout     = 10 * time.Second
	defaultMaxRetries  = 100
	defaultMaxFailures = 10

	// defaultRetryAfter is the wait before retrying a 409 that carries no
	// usable Retry-After header.
	defaultRetryAfter = time.Second
	// maxRetryAfter caps a single Retry-After wait.
	maxRetryAfter = 30 * time.Second
	// maxRequests bounds Keys*Dups.
	maxRequests = 100_000_000
	// snippetLen is how many leading body bytes are kept for failure reasons.
	snippetLen = 48
	// progressInterval is how often the progress line is rewritten.
	progressInterval = 200 * time.Millisecond
)

// ErrInvalidConfig is wrapped by the errors Run returns for a Config it
// cannot run.
var ErrInvalidConfig = errors.New("invalid storm config")

// Config describes one storm. The zero value of every optional field selects
// a documented default.
type Config struct {
	// URL is the absolute http or https URL every request is sent to.
	URL string
	// Method is the HTTP method; empty means POST.
	Method string
	// Body is the request body sent with every request; it may be empty.
	// When it is non-empty and Header has no Content-Type,
	// "Content-Type: application/json" is sent.
	Body []byte
	// BodyFor, when set, overrides Body: it is called once per key with the
	// key and its ordinal (0 to Keys-1) and the bytes it returns are sent by
	// every duplicate of that key, so duplicates stay identical while
	// different keys may carry different payloads.
	BodyFor func(key string, i int) []byte
	// Header holds extra headers sent with every request. A "Host" entry
	// sets the request's Host. Idempotency-Key is always set by the storm.
	Header http.Header
	// Keys is the number of distinct idempotency keys; 0 means 100.
	Keys int
	// Dups is the number of identical requests sent per key; 0 means 10.
	Dups int
	// Concurrency is the number of concurrent workers; 0 means 64.
	Concurrency int
	// Timeout bounds each individual attempt, including reading the
	// response body; 0 means 10s.
	Timeout time.Duration
	// Retry409 makes a worker retry a non-replayed 409 answer after its
	// Retry-After delay until it gets a different answer.
	Retry409 bool
	// MaxRetries bounds the retries of one request when Retry409 is set;
	// 0 means 100.
	MaxRetries int
	// MaxFailures bounds how many failing keys Report.Failures lists;
	// 0 means 10, a negative value lists all of them.
	MaxFailures int
	// KeyPrefix is prepended to every generated key, e.g. to find the
	// storm's keys in server logs.
	KeyPrefix string
	// Client is the HTTP client to use. When nil, Run builds a client whose
	// transport keeps Concurrency idle keep-alive connections to the host
	// and that does not follow redirects, and closes it at the end.
	Client *http.Client
	// Progress, when non-nil, receives a progress line rewritten in place
	// with carriage returns every 200ms, cleared when the storm ends. Only
	// point it at a terminal.
	Progress io.Writer
}

// attempt is the outcome of one HTTP attempt.
type attempt struct {
	status     int // 0 for transport errors
	replay     bool
	sum        [sha256.Size]byte
	size       int64
	snippet    []byte
	latency    time.Duration
	retryAfter string
	err        error
}

// keyRun holds one key and the attempts made for it.
type keyRun struct {
	key     string
	body    []byte
	gate    chan struct{} // closed once all duplicates were picked up
	arrived atomic.Int64

	mu       sync.Mutex
	attempts []attempt
}

func (k *keyRun) record(a attempt) {
	k.mu.Lock()
	k.attempts = append(k.attempts, a)
	k.mu.Unlock()
}

// runner is the state shared by the workers of one storm.
type runner struct {
	cfg    Config
	target *url.URL
	client *http.Client
	header http.Header
	host   string

	attempts  atomic.Int64 // HTTP attempts finished (responses + errors)
	completed atomic.Int64 // logical (key, dup) requests finished
	inFlight  atomic.Int64
	retries   atomic.Int64
}

// Run executes the storm described by cfg and returns its report. It
// returns an error wrapping ErrInvalidConfig, and no report, when cfg is
// invalid. When ctx is cancelled before the storm completes, Run stops
// sending, waits for the requests in flight to be abandoned and returns the
// partial report, marked Interrupted, together with ctx.Err().
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, target, err := normalize(cfg)
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, target: target}
	r.header = cfg.Header.Clone()
	if r.header == nil {
		r.header = http.Header{}
	}
	if h := r.header.Get("Host"); h != "" {
		r.host = h
	}
	r.header.Del("Host")
	r.header.Del(headerIdempotencyKey)
	if r.header.Get("User-Agent") == "" {
		r.header.Set("User-Agent", "idemkey-storm")
	}
	r.client = cfg.Client
	if r.client == nil {
		tr := newTransport(cfg.Concurrency)
		defer tr.CloseIdleConnections()
		r.client = &http.Client{
			Transport: tr,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		}
	}

	keys := make([]*keyRun, cfg.Keys)
	for i := range keys {
		k := &keyRun{key: cfg.KeyPrefix + newKey(), gate: make(chan struct{})}
		if cfg.BodyFor != nil {
			k.body = cfg.BodyFor(k.key, i)
		} else {
			k.body = cfg.Body
		}
		keys[i] = k
	}

	start := time.Now()
	stopProgress := r.startProgress(start)
	r.storm(ctx, keys)
	elapsed := time.Since(start)
	stopProgress()

	rep := r.report(keys, elapsed)
	if err := ctx.Err(); err != nil && r.completed.Load() < int64(cfg.Keys*cfg.Dups) {
		rep.Interrupted = true
		return rep, err
	}
	return rep, nil
}

// normalize applies defaults and validates cfg.
func normalize(cfg Config) (Config, *url.URL, error) {
	bad := func(format string, args ...any) (Config, *url.URL, error) {
		return cfg, nil, fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if cfg.Method == "" {
		cfg.Method = http.MethodPost
	}
	if !isToken(cfg.Method) {
		return bad("invalid method %q", cfg.Method)
	}
	target, err := parseURL(cfg.URL)
	if err != nil {
		return bad("%v", err)
	}
	switch {
	case cfg.Keys < 0:
		return bad("keys must not be negative")
	case cfg.Dups < 0:
		return bad("dups must not be negative")
	case cfg.Concurrency < 0:
		return bad("concurrency must not be negative")
	}
	if cfg.Keys == 0 {
		cfg.Keys = defaultKeys
	}
	if cfg.Dups == 0 {
		cfg.Dups = defaultDups
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = defaultConcurrency
	}
	if int64(cfg.Keys)*int64(cfg.Dups) > maxRequests {
		return bad("keys*dups must not exceed %d", maxRequests)
	}
	switch {
	case cfg.Timeout < 0:
		return bad("timeout must not be negative")
	case cfg.Timeout == 0:
		cfg.Timeout = defaultTimeout
	}
	switch {
	case cfg.MaxRetries < 0:
		return bad("max retries must not be negative")
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = defaultMaxRetries
	}
	if cfg.MaxFailures == 0 {
		cfg.MaxFailures = defaultMaxFailures
	}
	for name, values := range cfg.Header {
		if !isToken(name) {
			return bad("invalid header name %q", name)
		}
		for _, v := range values {
			if strings.ContainsAny(v, "\r\n\x00") {
				return bad("invalid value for header %s", name)
			}
		}
	}
	return cfg, target, nil
}

// parseURL parses and checks a storm target: an absolute http or https URL
// with a host.
func parseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("URL is required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("invalid URL %q: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("invalid URL %q: scheme must be http or https", raw)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("invalid URL %q: missing host", raw)
	}
	return u, nil
}

// newTransport returns a keep-alive transport sized for n workers.
func newTransport(n int) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = n
	tr.MaxIdleConnsPerHost = n
	tr.MaxConnsPerHost = 0
	tr.DisableKeepAlives = false
	return tr
}

// newKey returns a random UUIDv4 string.
func newKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

type job struct {
	k *keyRun
}

// storm feeds the (key, duplicate) pairs to the workers and waits for them.
func (r *runner) storm(ctx context.Context, keys []*keyRun) {
	dups := r.cfg.Dups
	// Gating is only safe when all duplicates of a key can be held by
	// workers at the same time.
	gated := dups > 1 && dups <= r.cfg.Concurrency
	jobs := make(chan job) // unbuffered: keeps the key-major order strict
	go func() {
		defer close(jobs)
		for _, k := range keys {
			for range dups {
				select {
				case jobs <- job{k: k}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	var wg sync.WaitGroup
	for range r.cfg.Concurrency {
		wg.Go(func() {
			for j := range jobs {
				if ctx.Err() != nil {
					continue // drain
				}
				if gated {
					if j.k.arrived.Add(1) == int64(dups) {
						close(j.k.gate)
					}
					select {
					case <-j.k.gate:
					case <-ctx.Done():
						continue
					}
				}
				if r.request(ctx, j.k) {
					r.completed.Add(1)
				}
			}
		})
	}
	wg.Wait()
}

// request performs one logical request for k, retrying 409s when
// configured. It reports whether it ran to completion.
func (r *runner) request(ctx context.Context, k *keyRun) bool {
	for retry := 0; ; retry++ {
		a, ok := r.send(ctx, k)
		if !ok {
			return false
		}
		k.record(a)
		r.attempts.Add(1)
		if !r.cfg.Retry409 || a.err != nil || a.status != http.StatusConflict || a.replay || retry >= r.cfg.MaxRetries {
			return true
		}
		t := time.NewTimer(retryAfter(a.retryAfter, time.Now()))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
		r.retries.Add(1)
	}
}

// send sends one HTTP request for k. ok is false when ctx was cancelled,
// in which case the attempt is not recorded.
func (r *runner) send(ctx context.Context, k *keyRun) (a attempt, ok bool) {
	actx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	var body io.Reader = http.NoBody
	if len(k.body) > 0 {
		body = bytes.NewReader(k.body)
	}
	req, err := http.NewRequestWithContext(actx, r.cfg.Method, r.target.String(), body)
	if err != nil {
		return attempt{err: err}, true
	}
	req.Header = r.header.Clone()
	req.Header.Set(headerIdempotencyKey, k.key)
	if len(k.body) > 0 && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.host != "" {
		req.Host = r.host
	}

	r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	start := time.Now()
	resp, err := r.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return attempt{}, false
		}
		return attempt{err: err, latency: time.Since(start)}, true
	}
	h := sha256.New()
	snip := &prefixWriter{max: snippetLen}
	n, err := io.Copy(io.MultiWriter(h, snip), resp.Body)
	_ = resp.Body.Close()
	lat := time.Since(start)
	if err != nil {
		if ctx.Err() != nil {
			return attempt{}, false
		}
		return attempt{err: fmt.Errorf("reading %d response body: %w", resp.StatusCode, err), latency: lat}, true
	}
	a = attempt{
		status:     resp.StatusCode,
		replay:     strings.EqualFold(strings.TrimSpace(resp.Header.Get(headerReplayed)), "true"),
		size:       n,
		snippet:    snip.buf,
		latency:    lat,
		retryAfter: resp.Header.Get("Retry-After"),
	}
	h.Sum(a.sum[:0])
	return a, true
}

// prefixWriter keeps the first max bytes written to it.
type prefixWriter struct {
	max int
	buf []byte
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	if room := w.max - len(w.buf); room > 0 {
		w.buf = append(w.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// retryAfter interprets a Retry-After header value: delta seconds (possibly
// fractional) or an HTTP date. It returns defaultRetryAfter for an empty or
// malformed value and never more than maxRetryAfter.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return defaultRetryAfter
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if math.IsNaN(secs) || secs < 0 {
			return defaultRetryAfter
		}
		if secs >= maxRetryAfter.Seconds() {
			return maxRetryAfter
		}
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		d := t.Sub(now)
		return max(0, min(d, maxRetryAfter))
	}
	return defaultRetryAfter
}

// startProgress starts the progress line writer, if any, and returns the
// function that stops it and clears the line.
func (r *runner) startProgress(start time.Time) func() {
	w := r.cfg.Progress
	if w == nil {
		return func() {}
	}
	total := r.cfg.Keys * r.cfg.Dups
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		width := 0
		for {
			select {
			case <-done:
				if width > 0 {
					fmt.Fprintf(w, "\r%s\r", strings.Repeat(" ", width))
				}
				return
			case now := <-t.C:
				secs := now.Sub(start).Seconds()
				n := r.attempts.Load()
				line := fmt.Sprintf("storm: %d/%d requests done, %d in flight, %d retries, %.0f req/s, %.1fs",
					r.completed.Load(), total, r.inFlight.Load(), r.retries.Load(), float64(n)/secs, secs)
				pad := ""
				if len(line) < width {
					pad = strings.Repeat(" ", width-len(line))
				}
				width = max(width, len(line))
				fmt.Fprintf(w, "\r%s%s", line, pad)
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// report classifies the attempts and builds the report.
func (r *runner) report(keys []*keyRun, elapsed time.Duration) *Report {
	cfg := r.cfg
	rep := &Report{
		URL:          cfg.URL,
		Method:       cfg.Method,
		Keys:         cfg.Keys,
		Dups:         cfg.Dups,
		Concurrency:  cfg.Concurrency,
		Timeout:      cfg.Timeout,
		Retry409:     cfg.Retry409,
		Elapsed:      elapsed,
		Retries:      int(r.retries.Load()),
		StatusCounts: map[int]int{},
	}
	var latencies []time.Duration
	var firstErr error
	for _, k := range keys {
		k.mu.Lock()
		attempts := k.attempts
		k.mu.Unlock()
		kc := classifyKey(k.key, attempts)
		rep.Requests += len(attempts)
		rep.Originals += kc.failure.Originals
		rep.Replays += kc.failure.Replays
		rep.InProgress += kc.failure.InProgress
		rep.TransportErrors += kc.transportErrors
		rep.ServerErrors += kc.serverErrors
		for _, a := range attempts {
			if a.err != nil {
				if firstErr == nil {
					firstErr = a.err
				}
				continue
			}
			rep.Responses++
			rep.StatusCounts[a.status]++
			latencies = append(latencies, a.latency)
		}
		if kc.finals == 0 {
			rep.KeysUnresolved++
		}
		if kc.failure.Reason == "" {
			rep.KeysPassed++
			continue
		}
		rep.KeysFailed++
		if cfg.MaxFailures < 0 || len(rep.Failures) < cfg.MaxFailures {
			rep.Failures = append(rep.Failures, kc.failure)
		}
	}
	rep.Errors = rep.TransportErrors + rep.ServerErrors
	rep.Latency = percentiles(latencies)
	if rep.Responses == 0 && rep.Requests > 0 {
		rep.Error = fmt.Sprintf("no HTTP response: all %d requests failed (first error: %v)", rep.Requests, firstErr)
	}
	return rep
}

// keyClass is the classification of one key's attempts.
type keyClass struct {
	failure         Failure // Reason is empty when the key passed
	finals          int
	transportErrors int
	serverErrors    int
}

// finalResponse identifies a distinct final response.
type finalResponse struct {
	status int
	sum    [sha256.Size]byte
}

// classifyKey applies the verdict rules documented in the package doc.
func classifyKey(key string, attempts []attempt) keyClass {
	var kc keyClass
	f := &kc.failure
	f.Key = key
	f.Statuses = map[int]int{}
	type distinct struct {
		a     attempt
		count int
	}
	var order []finalResponse
	seen := map[finalResponse]*distinct{}
	for _, a := range attempts {
		if a.err != nil {
			kc.transportErrors++
			f.Errors++
			continue
		}
		f.Statuses[a.status]++
		switch {
		case a.replay:
			f.Replays++
		case a.status == http.StatusConflict:
			f.InProgress++
			continue
		case a.status >= 500:
			kc.serverErrors++
			f.Errors++
			continue
		default:
			f.Originals++
		}
		kc.finals++
		id := finalResponse{a.status, a.sum}
		if d, ok := seen[id]; ok {
			d.count++
		} else {
			seen[id] = &distinct{a: a, count: 1}
			order = append(order, id)
		}
	}
	var reasons []string
	if f.Originals > 1 {
		reasons = append(reasons, fmt.Sprintf("executed %d times (%d responses without %s: true)",
			f.Originals, f.Originals, headerReplayed))
	}
	if len(order) > 1 {
		// Most frequent first, then first seen.
		sort.SliceStable(order, func(i, j int) bool { return seen[order[i]].count > seen[order[j]].count })
		var parts []string
		for i, id := range order {
			if i == 3 {
				parts = append(parts, fmt.Sprintf("and %d more", len(order)-3))
				break
			}
			d := seen[id]
			parts = append(parts, fmt.Sprintf("%d %s x%d", id.status, describeBody(d.a), d.count))
		}
		reasons = append(reasons, fmt.Sprintf("divergent: %d distinct final responses: %s",
			len(order), strings.Join(parts, ", ")))
	}
	f.Reason = strings.Join(reasons, "; ")
	return kc
}

// describeBody renders a short, quoted description of a response body.
func describeBody(a attempt) string {
	if a.size == 0 {
		return "(empty body)"
	}
	s := strconv.Quote(string(a.snippet))
	if a.size > int64(len(a.snippet)) {
		s += fmt.Sprintf("...(%d bytes)", a.size)
	}
	return s
}

// percentiles computes nearest-rank latency percentiles.
func percentiles(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p/100*float64(len(ds)))) - 1
		return ds[max(0, min(i, len(ds)-1))]
	}
	return Latency{P50: rank(50), P90: rank(90), P99: rank(99), Max: ds[len(ds)-1]}
}

// isToken reports whether s is a non-empty RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
