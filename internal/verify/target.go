package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/idemkey/idemkey/internal/httpflag"
)

// Target is the endpoint the checks run against: a server at a URL
// (NewURLTarget, for idemkey verify) or an http.Handler in process
// (NewHandlerTarget, for idemkeytest). Its methods are called from several
// goroutines at once.
type Target interface {
	// Send sends req and returns its response, whose body the checks read
	// and close. With lose, the answer is to be lost on its way back once
	// the endpoint has done its work: Send then returns the error the
	// client saw.
	Send(req *http.Request, lose bool) (*http.Response, error)
	// Count reads the side-effect counter; ok is false when there is none.
	Count(ctx context.Context) (n int64, ok bool, err error)
}

// URLTarget sends each request over HTTP on a fresh connection, never
// following redirects.
type URLTarget struct {
	client                *http.Client
	tr                    *http.Transport
	countURL, countField  string
	faultName, faultValue string
	timeout               time.Duration
}

var _ Target = (*URLTarget)(nil)

// NewURLTarget returns a target for a server: countURL and countField
// (both or neither) name a JSON side-effect counter, read with one GET
// bounded by timeout; faultName and faultValue (both or neither) a request
// header that makes the server lose its answer. Close it after the run.
func NewURLTarget(countURL, countField, faultName, faultValue string, timeout time.Duration) *URLTarget {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// A fresh connection per request: net/http resends a request that
	// carries Idempotency-Key on its own when a reused connection breaks,
	// which would hide a lost answer and add attempts no check counted.
	tr.DisableKeepAlives = true
	tr.MaxConnsPerHost = 0
	return &URLTarget{
		client: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
		tr:       tr,
		countURL: countURL, countField: countField,
		faultName: faultName, faultValue: faultValue,
		timeout: timeout,
	}
}

// Close closes the target's idle connections.
func (t *URLTarget) Close() { t.tr.CloseIdleConnections() }

// Send sends req; with lose, carrying the fault header.
func (t *URLTarget) Send(req *http.Request, lose bool) (*http.Response, error) {
	if lose && t.faultName != "" {
		req.Header.Set(t.faultName, t.faultValue)
	}
	return t.client.Do(req)
}

// Count reads the counter at the count URL.
func (t *URLTarget) Count(ctx context.Context) (n int64, ok bool, err error) {
	if t.countURL == "" {
		return 0, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.countURL, nil)
	if err != nil {
		return 0, true, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "idemkey-verify")
	resp, err := t.client.Do(req)
	if err != nil {
		return 0, true, fmt.Errorf("--count-url: %w", unwrapURLError(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, true, fmt.Errorf("--count-url: reading the body: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, true, fmt.Errorf("--count-url: status %d", resp.StatusCode)
	}
	n, err = httpflag.CountField(b, t.countField)
	if err != nil {
		return 0, true, fmt.Errorf("--count-url: %w", err)
	}
	return n, true, nil
}

// errDropped is how a handler target loses an answer.
var errDropped = errors.New("the answer was dropped on the floor")

// errExited stands for a handler that neither returned nor panicked: it
// called runtime.Goexit, which net/http's server takes for a dead
// connection, as it does a panic with http.ErrAbortHandler.
var errExited = errors.New("exited")

// handlerTarget serves each request with an http.Handler in process.
type handlerTarget struct {
	h     http.Handler
	count func() int64
}

// NewHandlerTarget returns a target that serves each request with h in
// process, as net/http's server would (a recovered panic, or a handler that
// calls runtime.Goexit, is a lost connection), and reads count, if not nil,
// as the side-effect counter. To lose an answer it lets h finish and throws
// the response away.
func NewHandlerTarget(h http.Handler, count func() int64) Target {
	return &handlerTarget{h: h, count: count}
}

// Send serves req with the handler, on a goroutine of its own, and waits
// for it until req's context ends. A handler still running then is left
// to finish on its own.
func (t *handlerTarget) Send(req *http.Request, lose bool) (*http.Response, error) {
	in := req.Clone(req.Context())
	if in.Host == "" {
		in.Host = "example.com"
	}
	in.RemoteAddr = "192.0.2.1:1234"
	in.RequestURI = req.URL.RequestURI()
	rec := httptest.NewRecorder()
	done := make(chan any, 1)
	go func() {
		returned := false
		defer func() {
			p := recover()
			if p == nil && !returned {
				p = errExited
			}
			done <- p
		}()
		t.h.ServeHTTP(rec, in)
		returned = true
	}()
	select {
	case p := <-done:
		if p == errExited {
			return nil, errors.New("the handler exited (runtime.Goexit): the connection would be closed without an answer")
		}
		if err, ok := p.(error); ok && errors.Is(err, http.ErrAbortHandler) {
			return nil, errors.New("the handler aborted (http.ErrAbortHandler): the connection would be closed without an answer")
		}
		if p != nil {
			return nil, fmt.Errorf("the handler panicked: %v", p)
		}
	case <-req.Context().Done():
		return nil, fmt.Errorf("the handler did not answer: %w", context.Cause(req.Context()))
	}
	if lose {
		return nil, errDropped
	}
	return rec.Result(), nil
}

// Count calls the counter.
func (t *handlerTarget) Count(context.Context) (int64, bool, error) {
	if t.count == nil {
		return 0, false, nil
	}
	return t.count(), true, nil
}
