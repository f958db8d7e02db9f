package hop

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// defaultMaxConns is the default Options.MaxConns.
const defaultMaxConns = 1024

// Options configures the hops; the zero value gives the defaults.
type Options struct {
	// Now is the clock the schedule is read on: a request (or, TCP, a
	// write) meets the window open at Now() - start, start being what
	// Begin was given. The delays themselves are waited on timers. Tests
	// set it to open a window without waiting for it.
	// Default: time.Now.
	Now func() time.Time

	// MaxConns bounds the connections each hop holds open from its
	// clients at once: past it, the hop accepts the next one when one
	// closes. It bounds the hop's goroutines with them (HTTP: one per
	// connection; TCP: three per connection, with its upstream one).
	// Default: 1024.
	MaxConns int

	// Transport is how an HTTP hop sends the requests it forwards (a
	// retrying idemclient Transport makes the hop a retrying layer).
	// Default: an http.Transport of the hop's own, with no proxy from the
	// environment, keeping up to 128 idle connections to the upstream.
	Transport http.RoundTripper

	// Rand returns a uniformly distributed number in [0, 1) for the draws
	// of a latency range. It is called concurrently.
	// Default: math/rand/v2's Float64.
	Rand func() float64
}

// Counts is what a hop did, in one window or in all.
type Counts struct {
	// Requests counts, for an HTTP hop, the requests that arrived; for a
	// TCP hop, the client's writes as the hop read them (a Redis command,
	// usually, or a pipeline of them).
	Requests int64
	// Delayed counts the requests (writes) held for the window's latency.
	Delayed int64
	// Failed counts the requests answered with the window's error status
	// and not forwarded.
	Failed int64
	// Refused counts the connections reset: accepted while the hop was
	// down, or open when it went down (at their next byte).
	Refused int64
	// UpstreamErrors counts the requests (HTTP: answered 502) or
	// connections (TCP: closed) the upstream could not be reached for, or
	// that it cut short.
	UpstreamErrors int64
}

// counts is Counts, counted concurrently.
type counts struct {
	requests, delayed, failed, refused, upstream atomic.Int64
}

func (c *counts) load() Counts {
	return Counts{
		Requests: c.requests.Load(), Delayed: c.delayed.Load(), Failed: c.failed.Load(),
		Refused: c.refused.Load(), UpstreamErrors: c.upstream.Load(),
	}
}

// Record is what one window of a hop's schedule did, for the report.
type Record struct {
	// Hop and Kind are the hop's.
	Hop  string
	Kind Kind
	// Window is the window, as its fault gave it.
	Window Window
	// Counts are what happened to the requests and connections that met
	// the window open.
	Counts
}

// Hop is one running hop: a listener on loopback that forwards to its
// upstream, and disturbs what passes while a window of its schedule is
// open. Its methods are safe for concurrent use.
type Hop struct {
	spec    Spec
	windows []Window // sorted by At, none overlapping
	o       Options
	ln      *limitListener
	ctx     context.Context // cancelled by Close: ends waits and forwarded requests
	cancel  context.CancelFunc

	run    atomic.Pointer[run]
	totals counts

	work    tracker // goroutines that serve or forward
	srv     *http.Server
	forward http.Handler

	mu    sync.Mutex
	conns map[net.Conn]struct{} // TCP: both ends of every pipe, for Close
	stop  sync.Once
	err   error
}

// run is one run of a hop's schedule: from a start, with fresh counts per
// window.
type run struct {
	start   time.Time
	windows []*windowRun
}

type windowRun struct {
	Window
	counts
	bp   int64        // Errors in basis points
	seen atomic.Int64 // requests met, for the spread of errors
}

// Listen starts a hop of spec with the windows of its schedule (in any
// order): it listens on spec.Listen and forwards from now on, without
// faults until Begin starts the schedule. It returns an error if a window
// is invalid for the hop's kind or overlaps another, or if the address
// cannot be listened on. The hop runs until Close.
func Listen(spec Spec, windows []Window, o Options) (*Hop, error) {
	windows = slices.Clone(windows)
	slices.SortStableFunc(windows, func(a, b Window) int { return cmp.Compare(a.At, b.At) })
	for i, w := range windows {
		if err := w.check(spec.Kind); err != nil {
			return nil, fmt.Errorf("hop %s: --fault %q: %v", spec.Name, spec.Name+" "+w.String(), err)
		}
		if i > 0 && windows[i-1].End() > w.At {
			return nil, fmt.Errorf("hop %s: the windows %q and %q overlap; give one window all the effects of a time",
				spec.Name, windows[i-1].String(), w.String())
		}
	}
	if spec.Kind != HTTP && spec.Kind != TCP {
		return nil, fmt.Errorf("hop %s: unknown kind %q", spec.Name, spec.Kind)
	}
	if _, err := loopbackAddr(spec.Listen); err != nil {
		return nil, fmt.Errorf("hop %s: %v", spec.Name, err)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxConns <= 0 {
		o.MaxConns = defaultMaxConns
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	h := &Hop{spec: spec, windows: windows, o: o, conns: map[net.Conn]struct{}{}}
	var err error
	if spec.Kind == HTTP {
		err = h.prepareHTTP()
	}
	if err != nil {
		return nil, err
	}
	inner, err := net.Listen("tcp", spec.Listen)
	if err != nil {
		return nil, fmt.Errorf("hop %s: %w", spec.Name, err)
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.ln = newLimitListener(inner, o.MaxConns, h.refuse)
	if spec.Kind == HTTP {
		h.serveHTTP()
	} else {
		h.work.Go(h.serveTCP)
	}
	return h, nil
}

// Name returns the hop's name.
func (h *Hop) Name() string { return h.spec.Name }

// Kind returns the hop's kind.
func (h *Hop) Kind() Kind { return h.spec.Kind }

// Spec returns the hop's spec, with Listen the address it listens on (the
// port picked, if the spec asked for port 0).
func (h *Hop) Spec() Spec {
	s := h.spec
	s.Listen = h.Addr()
	return s
}

// Addr returns the address the hop listens on, host:port.
func (h *Hop) Addr() string { return h.ln.Addr().String() }

// URL returns the hop's base URL for an HTTP hop ("http://" and Addr), ""
// for a TCP hop.
func (h *Hop) URL() string {
	if h.spec.Kind != HTTP {
		return ""
	}
	return "http://" + h.Addr()
}

// Windows returns the hop's schedule, sorted by At.
func (h *Hop) Windows() []Window { return slices.Clone(h.windows) }

// Begin starts a run of the schedule at start, the run's start: a window
// opens at start+At. The counts of the windows start from zero, so a
// storm that runs the same schedule for several arms calls Begin before
// each and reads Records after it. Requests already in the hop keep the
// window they met.
func (h *Hop) Begin(start time.Time) {
	r := &run{start: start, windows: make([]*windowRun, len(h.windows))}
	for i, w := range h.windows {
		r.windows[i] = &windowRun{Window: w, bp: w.errorBasisPoints()}
	}
	h.run.Store(r)
}

// Records returns what each window of the current run did (since the last
// Begin), in the schedule's order; nil before Begin.
func (h *Hop) Records() []Record {
	r := h.run.Load()
	if r == nil {
		return nil
	}
	out := make([]Record, len(r.windows))
	for i, w := range r.windows {
		out[i] = Record{Hop: h.spec.Name, Kind: h.spec.Kind, Window: w.Window, Counts: w.load()}
	}
	return out
}

// Totals returns what the hop did since it started listening, in and out
// of windows, over every run.
func (h *Hop) Totals() Counts { return h.totals.load() }

// open returns the window of the current run open now, or nil.
func (h *Hop) open() *windowRun {
	r := h.run.Load()
	if r == nil {
		return nil
	}
	e := h.o.Now().Sub(r.start)
	for _, w := range r.windows {
		if w.At <= e && e < w.End() {
			return w
		}
		if w.At > e {
			break
		}
	}
	return nil
}

// latency returns the delay window w adds to one request.
func (h *Hop) latency(w *windowRun) time.Duration {
	if w.LatencyMax <= w.Latency {
		return w.Latency
	}
	f := h.o.Rand()
	if f < 0 || f >= 1 {
		f = 0
	}
	return w.Latency + time.Duration(f*float64(w.LatencyMax-w.Latency+1))
}

// fails reports whether the request just met by w is one of the share it
// answers with its error status: the n-th request fails when the share of
// n requests, rounded down, is more than that of n-1.
func (w *windowRun) fails() bool {
	if w.bp == 0 {
		return false
	}
	n := w.seen.Add(1)
	return n*w.bp/10000 > (n-1)*w.bp/10000
}

// wait waits d, or until ctx or the hop is done; it reports whether the
// whole of d passed.
func (h *Hop) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-h.ctx.Done():
	}
	return false
}

// refuse is the listener's check of every connection it accepts: while a
// down window is open it resets the connection and reports true.
func (h *Hop) refuse(c net.Conn) bool {
	w := h.open()
	if w == nil || !w.Down {
		return false
	}
	w.refused.Add(1)
	h.totals.refused.Add(1)
	reset(c)
	return true
}

// Close stops the hop: it stops listening, closes every connection, ends
// the delays in progress and the requests being forwarded, and waits for
// every goroutine of the hop to return. It returns the first error met in
// closing; later calls return the same.
func (h *Hop) Close() error {
	h.stop.Do(func() {
		h.cancel()
		h.err = h.ln.Close()
		if h.srv != nil {
			_ = h.srv.Close() // every connection (and the listener, if Serve has it)
		} else {
			h.mu.Lock()
			for c := range h.conns {
				_ = c.Close()
			}
			h.mu.Unlock()
		}
		h.work.Wait()
		if t, ok := h.o.Transport.(interface{ CloseIdleConnections() }); ok && h.spec.Kind == HTTP {
			t.CloseIdleConnections()
		}
		if errors.Is(h.err, net.ErrClosed) {
			h.err = nil
		}
	})
	return h.err
}

// reset closes c with a TCP reset (SO_LINGER 0) rather than a FIN, as a
// host that refuses or drops a connection does.
func reset(c net.Conn) {
	if lc, ok := c.(*limitedConn); ok {
		reset(lc.Conn)
		lc.release()
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// tracker counts goroutines and waits for them, and refuses new ones once
// waiting has begun (a WaitGroup may not be added to while it is waited
// on from zero).
type tracker struct {
	mu     sync.Mutex
	n      int
	closed bool
	done   chan struct{}
}

// add counts one more goroutine; false once Wait was called.
func (t *tracker) add() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.n++
	return true
}

func (t *tracker) done1() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 && t.done != nil {
		close(t.done)
		t.done = nil
	}
}

// Go runs f on a counted goroutine, unless Wait was called.
func (t *tracker) Go(f func()) bool {
	if !t.add() {
		return false
	}
	go func() {
		defer t.done1()
		f()
	}()
	return true
}

// Wait refuses new goroutines and waits for the counted ones to return.
func (t *tracker) Wait() {
	t.mu.Lock()
	t.closed = true
	if t.n == 0 {
		t.mu.Unlock()
		return
	}
	done := make(chan struct{})
	t.done = done
	t.mu.Unlock()
	<-done
}

// limitListener accepts at most max connections open at once, and hands
// each accepted one to refuse first.
type limitListener struct {
	net.Listener
	slots  chan struct{}
	closed chan struct{}
	once   sync.Once
	refuse func(net.Conn) bool
}

func newLimitListener(l net.Listener, max int, refuse func(net.Conn) bool) *limitListener {
	return &limitListener{Listener: l, slots: make(chan struct{}, max), closed: make(chan struct{}), refuse: refuse}
}

// Accept waits for a free slot, then for a connection the hop does not
// refuse.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.closed:
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		lc := &limitedConn{Conn: c, l: l}
		if !l.refuse(lc) {
			return lc, nil
		}
	}
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// limitedConn gives its listener's slot back when closed.
type limitedConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitedConn) release() { c.once.Do(func() { <-c.l.slots }) }

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}
