package hop

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clock is the schedule's fake clock: a test moves it to open and close
// windows, and nothing waits for a window to come.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

var start = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// upstream is an HTTP server that counts the requests it serves.
type upstream struct {
	*httptest.Server
	served atomic.Int64
}

func newUpstream(t *testing.T, h http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{}
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("X-Path", r.URL.Path)
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"pay_1"}`)
		}
	}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.served.Add(1)
		h(w, r)
	}))
	u.Config.ErrorLog = log.New(io.Discard, "", 0)
	u.Start()
	t.Cleanup(u.Close)
	return u
}

// newHTTPHop starts an HTTP hop to up with the faults (without the hop's
// name: "at=… for=…"), on a fake clock set to the run's start.
func newHTTPHop(t *testing.T, up string, faults ...string) (*Hop, *clock) {
	t.Helper()
	c := &clock{t: start}
	var ws []Window
	for _, f := range faults {
		parsed, err := ParseFault("p " + f)
		require.NoError(t, err)
		ws = append(ws, parsed.Window)
	}
	h, err := Listen(Spec{Name: "p", Kind: HTTP, Listen: "127.0.0.1:0", Upstream: up}, ws, Options{Now: c.Now})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, h.Close()) })
	return h, c
}

// client is an HTTP client of its own, so that tests share no connections.
func client(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func post(t *testing.T, c *http.Client, url string) (int, string, error) {
	t.Helper()
	resp, err := c.Post(url, "application/json", strings.NewReader(`{"amount":1250}`))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func TestHTTPHopForwardsOutsideItsWindows(t *testing.T) {
	up := newUpstream(t, nil)
	h, c := newHTTPHop(t, up.URL+"/v1", "at=10s for=5s errors=100%")
	cl := client(t)

	status, body, err := post(t, cl, h.URL()+"/payments")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, "before Begin: no faults")
	require.Equal(t, `{"id":"pay_1"}`, body)
	require.Nil(t, h.Records())

	h.Begin(start)
	for _, at := range []time.Duration{0, 9*time.Second + 999*time.Millisecond, 15 * time.Second, time.Hour} {
		c.Set(start.Add(at))
		status, _, err := post(t, cl, h.URL()+"/payments")
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, status, "at %s the window is shut", at)
	}
	require.EqualValues(t, 5, up.served.Load())
	recs := h.Records()
	require.Len(t, recs, 1)
	require.Equal(t, Counts{}, recs[0].Counts, "nothing met the window")
	require.EqualValues(t, 5, h.Totals().Requests)

	resp, err := cl.Get(h.URL() + "/payments")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "/v1/payments", resp.Header.Get("X-Path"), "the upstream's path prefixes the request's")
}

func TestHTTPHopAnswersTheExactShareOfErrorsWithoutForwardingThem(t *testing.T) {
	up := newUpstream(t, nil)
	h, c := newHTTPHop(t, up.URL, "at=1s for=2s errors=25%:500", "at=5s for=1s errors=100%")
	h.Begin(start)
	cl := client(t)

	c.Set(start.Add(time.Second))
	statuses := map[int]int{}
	for i := range 100 {
		status, body, err := post(t, cl, h.URL())
		require.NoError(t, err)
		statuses[status]++
		if status == http.StatusInternalServerError {
			require.Zero(t, (i+1)%4, "every fourth request, spread evenly")
			require.Contains(t, body, "hop p: fault injected (at=1s for=2s errors=25%:500)")
		}
	}
	require.Equal(t, map[int]int{http.StatusInternalServerError: 25, http.StatusCreated: 75}, statuses)
	require.EqualValues(t, 75, up.served.Load(), "the failed share never reached the upstream")

	c.Set(start.Add(5500 * time.Millisecond))
	for range 10 {
		status, _, err := post(t, cl, h.URL())
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, status, "503 by default")
	}
	require.EqualValues(t, 75, up.served.Load())

	recs := h.Records()
	require.Equal(t, Counts{Requests: 100, Failed: 25}, recs[0].Counts)
	require.Equal(t, Counts{Requests: 10, Failed: 10}, recs[1].Counts)
}

func TestHTTPHopDelaysEveryRequestOfItsWindow(t *testing.T) {
	up := newUpstream(t, nil)
	const lo, hi = 30 * time.Millisecond, 60 * time.Millisecond
	h, c := newHTTPHop(t, up.URL, fmt.Sprintf("at=1s for=1s latency=%s..%s", lo, hi), "at=3s for=1s latency=40ms errors=50%")
	h.Begin(start)
	cl := client(t)

	c.Set(start.Add(1500 * time.Millisecond))
	for range 5 {
		began := time.Now()
		status, _, err := post(t, cl, h.URL())
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, status)
		// A lower bound only: the hop holds the request at least lo.
		require.GreaterOrEqual(t, time.Since(began), lo)
	}
	c.Set(start.Add(3 * time.Second))
	for range 4 {
		began := time.Now()
		_, _, err := post(t, cl, h.URL())
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(began), 40*time.Millisecond, "the failed share is delayed too")
	}
	c.Set(start.Add(2 * time.Second))
	_, _, err := post(t, cl, h.URL())
	require.NoError(t, err)

	recs := h.Records()
	require.Equal(t, Counts{Requests: 5, Delayed: 5}, recs[0].Counts)
	require.Equal(t, Counts{Requests: 4, Delayed: 4, Failed: 2}, recs[1].Counts)
	require.Equal(t, Counts{Requests: 10, Delayed: 9, Failed: 2}, h.Totals())
}

func TestHTTPHopLatencyRangeIsAUniformDraw(t *testing.T) {
	h := &Hop{o: Options{}}
	w := &windowRun{Window: Window{Latency: 100 * time.Millisecond, LatencyMax: 300 * time.Millisecond}}
	for _, tc := range []struct {
		draw float64
		want time.Duration
	}{{0, 100 * time.Millisecond}, {0.5, 200 * time.Millisecond}, {1 - 1e-12, 300 * time.Millisecond}, {-1, 100 * time.Millisecond}} {
		h.o.Rand = func() float64 { return tc.draw }
		require.InDelta(t, tc.want, h.latency(w), float64(time.Microsecond), "draw %v", tc.draw)
	}
	w.LatencyMax = 0
	require.Equal(t, 100*time.Millisecond, h.latency(w), "a fixed latency draws nothing")
}

func TestHTTPHopDownResetsNewAndOpenConnections(t *testing.T) {
	up := newUpstream(t, nil)
	h, c := newHTTPHop(t, up.URL, "at=1s for=1s down")
	h.Begin(start)
	cl := client(t)
	status, _, err := post(t, cl, h.URL()) // a keep-alive connection, open when the window opens
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)

	c.Set(start.Add(time.Second))
	_, _, err = post(t, cl, h.URL())
	require.Error(t, err, "the open connection is reset at its next request")
	_, _, err = post(t, client(t), h.URL())
	require.Error(t, err, "a new connection is reset when accepted")
	raw, err := net.Dial("tcp", h.Addr())
	if err == nil { // or the reset came before the handshake ended
		_, err = raw.Read(make([]byte, 1))
		raw.Close()
	}
	require.ErrorContains(t, err, "reset", "a reset, not a clean close")
	require.EqualValues(t, 1, up.served.Load())
	rec := h.Records()[0]
	require.GreaterOrEqual(t, rec.Refused, int64(3))

	c.Set(start.Add(2 * time.Second))
	status, _, err = post(t, cl, h.URL())
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, "up again once the window shuts")
}

func TestHTTPHopAnswers502WhenItsUpstreamIsGone(t *testing.T) {
	up := newUpstream(t, nil)
	url := up.URL
	up.Close()
	h, c := newHTTPHop(t, url, "at=1s for=1s latency=1ms")
	h.Begin(start)
	c.Set(start.Add(time.Second))
	status, body, err := post(t, client(t), h.URL())
	require.NoError(t, err)
	require.Equal(t, http.StatusBadGateway, status)
	require.Contains(t, body, "hop p: upstream")
	require.Equal(t, Counts{Requests: 1, Delayed: 1, UpstreamErrors: 1}, h.Records()[0].Counts)
}

func TestHopBeginStartsAFreshRunOfTheSchedule(t *testing.T) {
	up := newUpstream(t, nil)
	h, c := newHTTPHop(t, up.URL, "at=1s for=1s errors=100%")
	cl := client(t)
	h.Begin(start)
	c.Set(start.Add(time.Second))
	status, _, _ := post(t, cl, h.URL())
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.EqualValues(t, 1, h.Records()[0].Failed)

	// The second arm starts 10 s later: the window opens at its 1 s.
	h.Begin(start.Add(10 * time.Second))
	require.Equal(t, Counts{}, h.Records()[0].Counts)
	status, _, _ = post(t, cl, h.URL())
	require.Equal(t, http.StatusCreated, status, "1 s of the first run is before the second's start")
	c.Set(start.Add(11 * time.Second))
	status, _, _ = post(t, cl, h.URL())
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.EqualValues(t, 1, h.Records()[0].Failed)
	require.EqualValues(t, 2, h.Totals().Failed)
}

// Close ends a delay in progress, the client's connection, and every
// goroutine of the hop.
func TestHopCloseEndsDelaysConnectionsAndGoroutines(t *testing.T) {
	up := newUpstream(t, nil)
	before := runtime.NumGoroutine()
	c := &clock{t: start.Add(time.Second)}
	ws := []Window{{At: time.Second, For: time.Hour, Latency: time.Hour}}
	h, err := Listen(Spec{Name: "p", Kind: HTTP, Listen: "127.0.0.1:0", Upstream: up.URL}, ws, Options{Now: c.Now})
	require.NoError(t, err)
	h.Begin(start)
	cl := client(t)
	done := make(chan error, 1)
	go func() {
		_, _, err := post(t, cl, h.URL())
		done <- err
	}()
	require.Eventually(t, func() bool { return h.Totals().Delayed == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, h.Close())
	require.Error(t, <-done, "the held request ends with its connection")
	require.NoError(t, h.Close(), "Close twice")
	cl.CloseIdleConnections()
	if !waitGoroutines(before) {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines left: %d, before: %d\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
	}
	_, err = net.Dial("tcp", h.Addr())
	require.Error(t, err, "not listening any more")
}

// A hop holds at most MaxConns client connections: the next waits in the
// kernel's queue until one closes.
func TestHopMaxConnsBoundsItsConnections(t *testing.T) {
	up := newUpstream(t, nil)
	h, err := Listen(Spec{Name: "p", Kind: HTTP, Listen: "127.0.0.1:0", Upstream: up.URL}, nil, Options{MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	a, b := client(t), client(t)
	for _, cl := range []*http.Client{a, b} {
		status, _, err := post(t, cl, h.URL())
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, status)
	}
	require.Len(t, h.ln.slots, 2, "two idle keep-alive connections hold both slots")
	third := make(chan int, 1)
	go func() {
		status, _, _ := post(t, client(t), h.URL())
		third <- status
	}()
	select {
	case <-third:
		t.Fatal("a third connection was served while two were open")
	default:
	}
	a.CloseIdleConnections()
	require.Equal(t, http.StatusCreated, <-third, "served once a slot is free")
	require.EqualValues(t, 3, up.served.Load())
}

func TestOpenChecksEverythingBeforeListening(t *testing.T) {
	up := newUpstream(t, nil)
	spec := func(s string) Spec {
		p, err := ParseProxy(s)
		require.NoError(t, err)
		return p
	}
	tcp := func(s string) Spec {
		p, err := ParseTCPProxy(s)
		require.NoError(t, err)
		return p
	}
	fault := func(s string) Fault {
		f, err := ParseFault(s)
		require.NoError(t, err)
		return f
	}
	for _, tc := range []struct {
		name   string
		specs  []Spec
		faults []Fault
		want   string
	}{
		{"duplicate names", []Spec{spec("a=:0," + up.URL), tcp("a=:0,127.0.0.1:6379")}, nil, "two hops are named a"},
		{"unknown hop", []Spec{spec("a=:0," + up.URL)}, []Fault{fault("b at=1s for=1s down")}, "no --proxy or --tcp-proxy is named b"},
		{"errors on TCP", []Spec{tcp("r=:0,127.0.0.1:6379")}, []Fault{fault("r at=1s for=1s errors=50%")}, "needs an HTTP hop"},
		{"overlap", []Spec{spec("a=:0," + up.URL)}, []Fault{fault("a at=1s for=10s latency=1s"), fault("a at=5s for=1s down")}, "overlap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(tc.specs, tc.faults, Options{})
			require.ErrorContains(t, err, tc.want)
		})
	}
	// A hop that cannot listen: the one opened before it is closed.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	freeAddr := free.Addr().String()
	free.Close()
	_, err = Open([]Spec{spec("first=" + freeAddr + "," + up.URL), spec("second=" + busy.Addr().String() + "," + up.URL)}, nil, Options{})
	require.ErrorContains(t, err, "hop second")
	again, err := net.Listen("tcp", freeAddr)
	require.NoError(t, err, "the first hop was closed")
	again.Close()

	// Windows in any order; Records ordered by time, then hop.
	set, err := Open([]Spec{spec("a=:0," + up.URL), tcp("r=:0,127.0.0.1:6379")},
		[]Fault{fault("a at=5s for=1s down"), fault("r at=2s for=1s latency=5ms"), fault("a at=1s for=1s errors=1%")}, Options{})
	require.NoError(t, err)
	defer set.Close()
	require.Nil(t, set.Records())
	set.Begin(time.Now())
	var got []string
	for _, r := range set.Records() {
		got = append(got, r.Hop+" "+r.Window.String())
	}
	require.Equal(t, []string{"a at=1s for=1s errors=1%", "r at=2s for=1s latency=5ms", "a at=5s for=1s down"}, got)
	require.Equal(t, HTTP, set.Hop("a").Kind())
	require.Equal(t, TCP, set.Hop("r").Kind())
	require.Nil(t, set.Hop("zz"))
	require.Len(t, set.Hops(), 2)
	require.NotEqual(t, "127.0.0.1:0", set.Hop("a").Spec().Listen, "the port picked")
	require.NoError(t, set.Close())
}

func TestHopRequestGivenUpDuringItsDelayIsNotForwarded(t *testing.T) {
	up := newUpstream(t, nil)
	h, c := newHTTPHop(t, up.URL, "at=0s for=1h latency=1h")
	h.Begin(start)
	c.Set(start)
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL(), strings.NewReader("{}"))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := client(t).Do(req)
		done <- err
	}()
	require.Eventually(t, func() bool { return h.Totals().Delayed == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.NoError(t, h.Close())
	require.Zero(t, up.served.Load())
}

// waitGoroutines waits, within 10 s, for the goroutines to be no more than
// n: goroutines end a little after the connections they serve are closed.
func waitGoroutines(n int) bool {
	for range 1000 {
		if runtime.NumGoroutine() <= n {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}
