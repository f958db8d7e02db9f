package storm

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

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
