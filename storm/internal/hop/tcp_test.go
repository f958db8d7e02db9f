package hop

import (
	"bufio"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// echo is a TCP server that writes back every line it reads, as a Redis
// server answers each command.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func newTCPHop(t *testing.T, upstream string, faults ...string) (*Hop, *clock) {
	t.Helper()
	c := &clock{t: start}
	var ws []Window
	for _, f := range faults {
		parsed, err := ParseFault("r " + f)
		require.NoError(t, err)
		ws = append(ws, parsed.Window)
	}
	h, err := Listen(Spec{Name: "r", Kind: TCP, Listen: "127.0.0.1:0", Upstream: upstream}, ws, Options{Now: c.Now})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, h.Close()) })
	return h, c
}

// roundTrip writes line to c and reads the echo.
func roundTrip(c net.Conn, r *bufio.Reader, line string) (string, error) {
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestTCPHopPipesBothWays(t *testing.T) {
	h, _ := newTCPHop(t, echo(t))
	require.Empty(t, h.URL())
	c, r := dial(t, h.Addr())
	for _, line := range []string{"PING", "SET a 1", string(make([]byte, 100_000))} {
		got, err := roundTrip(c, r, line)
		require.NoError(t, err)
		require.Equal(t, line, got)
	}
	// A half-close passes through: the upstream sees the end and closes
	// its side, and the client reads what was sent before.
	_, err := io.WriteString(c, "LAST\n")
	require.NoError(t, err)
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Equal(t, "LAST\n", string(rest))
}

func TestTCPHopHoldsEveryWriteOfItsWindowInOrder(t *testing.T) {
	h, clk := newTCPHop(t, echo(t), "at=1s for=1s latency=20ms..40ms")
	h.Begin(start)
	c, r := dial(t, h.Addr())
	clk.Set(start.Add(time.Second))
	// Pipelined: ten writes before reading; each is held at least 20ms,
	// and none overtakes another though their draws differ.
	began := time.Now()
	for i := range 10 {
		_, err := io.WriteString(c, string(rune('a'+i))+"\n")
		require.NoError(t, err)
	}
	for i := range 10 {
		got, err := r.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, string(rune('a'+i))+"\n", got)
	}
	require.GreaterOrEqual(t, time.Since(began), 20*time.Millisecond) // a lower bound only
	rec := h.Records()[0]
	require.Positive(t, rec.Delayed)
	require.Equal(t, rec.Requests, rec.Delayed, "every write in the window is held")

	clk.Set(start.Add(2 * time.Second))
	got, err := roundTrip(c, r, "after")
	require.NoError(t, err)
	require.Equal(t, "after", got)
	require.Equal(t, rec.Delayed, h.Records()[0].Delayed, "none after the window")
}

func TestTCPHopDownRefusesNewConnectionsAndResetsOpenOnes(t *testing.T) {
	h, clk := newTCPHop(t, echo(t), "at=1s for=1s down")
	h.Begin(start)
	open, openR := dial(t, h.Addr())
	got, err := roundTrip(open, openR, "before")
	require.NoError(t, err)
	require.Equal(t, "before", got)

	clk.Set(start.Add(time.Second))
	_, err = roundTrip(open, openR, "during")
	require.Error(t, err, "the open connection is reset at its next byte")

	c, err := net.Dial("tcp", h.Addr())
	if err == nil {
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	require.ErrorContains(t, err, "reset", "a new connection is reset")
	require.EqualValues(t, 2, h.Records()[0].Refused)

	clk.Set(start.Add(2 * time.Second))
	c2, r2 := dial(t, h.Addr())
	got, err = roundTrip(c2, r2, "after")
	require.NoError(t, err)
	require.Equal(t, "after", got)
}

func TestTCPHopClosesItsClientWhenTheUpstreamIsGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	h, _ := newTCPHop(t, addr)
	c, r := dial(t, h.Addr())
	_, err = roundTrip(c, r, "PING")
	require.Error(t, err)
	require.EqualValues(t, 1, h.Totals().UpstreamErrors)
}

func TestTCPHopCloseEndsEveryPipe(t *testing.T) {
	up := echo(t)
	before := runtime.NumGoroutine()
	c := &clock{t: start}
	h, err := Listen(Spec{Name: "r", Kind: TCP, Listen: "127.0.0.1:0", Upstream: up},
		[]Window{{At: 0, For: time.Hour, Latency: time.Hour}}, Options{Now: c.Now})
	require.NoError(t, err)
	h.Begin(start)
	var conns []net.Conn
	for range 5 {
		conn, err := net.Dial("tcp", h.Addr())
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, "held for an hour\n")
		require.NoError(t, err)
		conns = append(conns, conn)
	}
	require.Eventually(t, func() bool { return h.Totals().Delayed == 5 }, 10*time.Second, time.Millisecond)
	require.NoError(t, h.Close())
	for _, conn := range conns {
		_, err := conn.Read(make([]byte, 1))
		require.Error(t, err, "closed by the hop")
	}
	if !waitGoroutines(before) {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines left: %d, before: %d\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
	}
}
