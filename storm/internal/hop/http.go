package hop

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// windowKey carries the window a forwarded request met, for its
// upstream's errors.
type windowKey struct{}

// errorBodyLimit bounds what an HTTP hop reads of a request it answers
// with an error, so that its connection can carry the next one.
const errorBodyLimit = 64 << 10

// prepareHTTP builds an HTTP hop's forwarding.
func (h *Hop) prepareHTTP() error {
	u, err := url.Parse(h.spec.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("hop %s: upstream %q: want an http:// or https:// URL", h.spec.Name, h.spec.Upstream)
	}
	if h.o.Transport == nil {
		h.o.Transport = &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        128,
			MaxIdleConnsPerHost: 128,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: 5 * time.Second,
		}
	}
	h.forward = &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport:  h.o.Transport,
		BufferPool: copyBuffers{},
		ErrorLog:   log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				// The client went away, or the hop is closing: cut the
				// connection rather than answer an empty 200.
				panic(http.ErrAbortHandler)
			}
			h.totals.upstream.Add(1)
			if win, ok := r.Context().Value(windowKey{}).(*windowRun); ok {
				win.upstream.Add(1)
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = fmt.Fprintf(w, "hop %s: upstream %s: %v\n", h.spec.Name, h.spec.Upstream, err)
		},
	}
	return nil
}

// copyBuffers lends the reverse proxy its buffers for copying response
// bodies, which it would otherwise allocate, 32 KiB, for every response.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (copyBuffers) Get() []byte  { return *copyBufferPool.Get().(*[]byte) }
func (copyBuffers) Put(b []byte) { copyBufferPool.Put(&b) }

// serveHTTP starts serving an HTTP hop on its listener.
func (h *Hop) serveHTTP() {
	h.srv = &http.Server{
		Handler:           http.HandlerFunc(h.handle),
		BaseContext:       func(net.Listener) context.Context { return h.ctx },
		ErrorLog:          log.New(io.Discard, "", 0),
		ReadHeaderTimeout: time.Minute,
		IdleTimeout:       2 * time.Minute,
	}
	h.work.Go(func() { _ = h.srv.Serve(h.ln) })
}

// handle is an HTTP hop's handler: the open window, if any, acts on the
// request, then it is forwarded.
func (h *Hop) handle(w http.ResponseWriter, r *http.Request) {
	if !h.work.add() {
		panic(http.ErrAbortHandler) // the hop is closing
	}
	defer h.work.done1()
	h.totals.requests.Add(1)
	win := h.open()
	if win != nil {
		win.requests.Add(1)
		if win.Down {
			// Down since this connection was accepted: reset it, as
			// the listener resets the new ones.
			win.refused.Add(1)
			h.totals.refused.Add(1)
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(http.ErrAbortHandler)
			}
			reset(c)
			return
		}
		if win.Latency > 0 || win.LatencyMax > 0 {
			win.delayed.Add(1)
			h.totals.delayed.Add(1)
			if !h.wait(r.Context(), h.latency(win)) {
				// The client gave up, or the hop is closing: cut the
				// connection rather than answer an empty 200.
				panic(http.ErrAbortHandler)
			}
		}
		if win.fails() {
			win.failed.Add(1)
			h.totals.failed.Add(1)
			_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, errorBodyLimit))
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(win.Status)
			_, _ = fmt.Fprintf(w, "hop %s: fault injected (%s)\n", h.spec.Name, win.Window.String())
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), windowKey{}, win))
	}
	h.forward.ServeHTTP(w, r)
}
