package hop

import (
	"errors"
	"net"
	"sync"
	"time"
)

// A TCP hop pipes each client connection to a connection of its own to
// the upstream. The client's writes go through a queue, each due when its
// latency has passed, so that a delay holds every byte for the same time
// and keeps their order; the upstream's replies pass straight back.

const (
	// tcpBuffer is the size of one read from either side.
	tcpBuffer = 32 << 10
	// tcpQueue bounds the client's writes held for their latency on one
	// connection: past it, the hop stops reading from the client.
	tcpQueue = 64
	// dialTimeout bounds a connection to the upstream.
	dialTimeout = 5 * time.Second
)

// chunk is a client's write on its way upstream.
type chunk struct {
	b   []byte
	due time.Time // when it may be written upstream
}

var chunkBufs = sync.Pool{New: func() any { b := make([]byte, tcpBuffer); return &b }}

// putBuf gives a chunk's buffer back, whole.
func putBuf(b []byte) {
	b = b[:cap(b)]
	chunkBufs.Put(&b)
}

// serveTCP accepts a TCP hop's connections until the listener closes.
func (h *Hop) serveTCP() {
	for {
		c, err := h.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// A transient accept error (out of files): wait a little,
			// or for Close.
			if !h.wait(h.ctx, 10*time.Millisecond) {
				return
			}
			continue
		}
		if !h.work.Go(func() { h.pipe(c) }) {
			_ = c.Close()
			return
		}
	}
}

// track adds c to the connections Close closes; false if the hop is
// closing.
func (h *Hop) track(c net.Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx.Err() != nil {
		return false
	}
	h.conns[c] = struct{}{}
	return true
}

func (h *Hop) untrack(c net.Conn) {
	h.mu.Lock()
	delete(h.conns, c)
	h.mu.Unlock()
}

// pipe forwards one client connection.
func (h *Hop) pipe(client net.Conn) {
	if !h.track(client) {
		_ = client.Close()
		return
	}
	defer h.untrack(client)
	up, err := (&net.Dialer{Timeout: dialTimeout}).DialContext(h.ctx, "tcp", h.spec.Upstream)
	if err != nil {
		h.totals.upstream.Add(1)
		if win := h.open(); win != nil {
			win.upstream.Add(1)
		}
		_ = client.Close()
		return
	}
	if !h.track(up) {
		_ = up.Close()
		_ = client.Close()
		return
	}
	defer h.untrack(up)

	var once sync.Once
	cut := func(refused bool) { // end both sides at once
		once.Do(func() {
			if refused {
				reset(client)
				reset(up)
				return
			}
			_ = client.Close()
			_ = up.Close()
		})
	}
	queue := make(chan chunk, tcpQueue)
	writerDone := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // the queue, upstream
		defer close(writerDone)
		for c := range queue {
			ok := h.waitUntil(c.due)
			if ok {
				_, err := up.Write(c.b)
				ok = err == nil
			}
			putBuf(c.b)
			if !ok {
				cut(false)
				for c := range queue { // give the rest back
					putBuf(c.b)
				}
				return
			}
		}
		closeWrite(up)
	})
	wg.Go(func() { // upstream to the client
		buf := make([]byte, tcpBuffer)
		for {
			n, err := up.Read(buf)
			if n > 0 {
				if win := h.open(); win != nil && win.Down {
					h.refused(win)
					cut(true)
					return
				}
				if _, werr := client.Write(buf[:n]); werr != nil {
					cut(false)
					return
				}
			}
			if err != nil {
				closeWrite(client)
				return
			}
		}
	})

	// The client to the queue.
	var last time.Time
	for {
		bp := chunkBufs.Get().(*[]byte)
		n, err := client.Read(*bp)
		if n > 0 {
			h.totals.requests.Add(1)
			due := time.Now()
			win := h.open()
			if win != nil {
				win.requests.Add(1)
				if win.Down {
					putBuf(*bp)
					h.refused(win)
					cut(true)
					break
				}
				if win.Latency > 0 || win.LatencyMax > 0 {
					win.delayed.Add(1)
					h.totals.delayed.Add(1)
					due = due.Add(h.latency(win))
				}
			}
			if due.Before(last) {
				due = last // keep the bytes in order
			}
			last = due
			select {
			case queue <- chunk{b: (*bp)[:n], due: due}:
			case <-writerDone:
				putBuf(*bp)
				err = net.ErrClosed
			}
		} else {
			putBuf(*bp)
		}
		if err != nil {
			break
		}
	}
	close(queue)
	wg.Wait()
	cut(false)
}

// refused counts a connection reset by an open down window.
func (h *Hop) refused(win *windowRun) {
	win.refused.Add(1)
	h.totals.refused.Add(1)
}

// waitUntil waits until t, or until the hop closes; it reports whether t
// was reached.
func (h *Hop) waitUntil(t time.Time) bool {
	return h.wait(h.ctx, time.Until(t))
}

// closeWrite half-closes c, or closes it if it cannot.
func closeWrite(c net.Conn) {
	if lc, ok := c.(*limitedConn); ok {
		c = lc.Conn
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		return
	}
	_ = c.Close()
}
