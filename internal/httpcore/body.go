package httpcore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// body is the request body the handler reads: the bytes read before the claim.
type body struct{ bytes.Reader }

func (*body) Close() error { return nil }

// readBody reads the whole request body, within MaxBodyBytes and
// BodyTimeout, before anything is claimed: a body that is too large, too
// slow or cut short never holds a key.
func (h *Guard) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *problem) {
	if r.ContentLength > h.o.MaxBodyBytes {
		return nil, h.tooLarge()
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if rd := readDeadliner(w); rd != nil && rd.SetReadDeadline(time.Now().Add(h.o.BodyTimeout)) == nil {
		defer func() { _ = rd.SetReadDeadline(time.Time{}) }()
	}
	body, err := readAll(r.Body, r.ContentLength, h.o.MaxBodyBytes+1)
	_ = r.Body.Close()
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, &problemBodyTimeout
	case err != nil:
		return nil, &problemBodyUnreadable
	case int64(len(body)) > h.o.MaxBodyBytes:
		return nil, h.tooLarge()
	}
	return body, nil
}

// readDeadliner returns the writer under w (through Unwrap, as
// http.ResponseController looks) that can set the connection's read
// deadline, or nil. Looking for it first spares the error that
// ResponseController makes for a writer that cannot (httptest's).
func readDeadliner(w http.ResponseWriter) interface{ SetReadDeadline(time.Time) error } {
	for range 32 { // writers wrapped deeper than that are not looked through
		switch t := w.(type) {
		case interface{ SetReadDeadline(time.Time) error }:
			return t
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return nil
		}
	}
	return nil
}

func (h *Guard) tooLarge() *problem {
	return problemBodyTooLarge.with(fmt.Sprintf(detailBodyTooLarge, h.o.MaxBodyBytes))
}

// readAll reads r to its end, or to limit bytes, into a buffer sized for a
// body of n bytes (when n >= 0), so a body of known length costs one
// allocation.
func readAll(r io.Reader, n, limit int64) ([]byte, error) {
	if n < 0 || n >= limit {
		n = 511
	}
	b := make([]byte, 0, n+1) // +1: room to see EOF (or an overlong body) without growing
	for int64(len(b)) < limit {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		k, err := r.Read(b[len(b):min(int64(cap(b)), limit)])
		b = b[:len(b)+k]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
	return b, nil
}
