package storm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// One attempt: its request, sent, and its answer taken in.

// send sends one HTTP request for k, bounded by rctx. ok is false when ctx
// (the storm's) was cancelled before the answer was complete: the attempt
// is then a transport error whose Error is "interrupted" (it was sent, and
// may have run), and the caller records it and stops. The caller numbers
// the attempt and records it.
func (r *runner) send(ctx, rctx context.Context, k *keyRun, probe bool) (a result, ok bool) {
	h := r.header(k)
	req := r.newRequest(rctx, k, h)
	client, rt := r.client, r.transport
	if probe {
		client, rt = r.probeClient, r.probeTransport
	}

	r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	start := time.Now()
	a.Op, a.Key, a.Probe, a.Sent = k.op.Op, k.key, probe, start.Sub(r.start)
	var resp *http.Response
	var err error
	if rt != nil {
		if resp, err = rt.RoundTrip(req); err != nil {
			err = &url.Error{Op: r.errOp, URL: r.errURL, Err: err}
		}
	} else {
		resp, err = client.Do(req)
	}
	if err != nil {
		if ctx.Err() != nil {
			a.failed(errInterrupted, a.Sent+time.Since(start), false)
			return a, false
		}
		a.failed(err, a.Sent+time.Since(start), rctx.Err() != nil)
		return a, true
	}
	a.Status = resp.StatusCode
	a.Replayed = strings.EqualFold(strings.TrimSpace(resp.Header.Get(headerReplayed)), "true")
	a.retryAfter = resp.Header.Get("Retry-After")
	s := sinks.Get().(*sink)
	s.reset(a.Replayed && isProblem(resp.Header.Get("Content-Type")))
	a.Size, err = io.CopyBuffer(s, resp.Body, s.buf)
	_ = resp.Body.Close()
	a.Done = a.Sent + time.Since(start)
	if err != nil {
		sinks.Put(s)
		if ctx.Err() != nil {
			a.failed(errInterrupted, a.Done, false)
			return a, false
		}
		a.failed(fmt.Errorf("reading %d response body: %w", resp.StatusCode, err), a.Done, rctx.Err() != nil)
		return a, true
	}
	putHeader(h) // the body is closed: net/http is done with the request
	s.h.Sum(a.BodySHA256[:0])
	if snip := wholeRunes(s.snip); len(snip) > 0 {
		a.Snippet = string(snip)
	}
	a.Oversize = s.problem != nil && isTooLarge(s.problem, a.Status)
	a.Class = classOf(a.Status, a.Replayed, false, false)
	sinks.Put(s)
	return a, true
}

// errInterrupted ends an attempt in flight when the storm is interrupted
// (its context cancelled): it is recorded as a transport error, since it
// was sent and may have run.
var errInterrupted = errors.New("interrupted")

// failed makes a the attempt that err ended at done, cut by the client's
// own timeout if timeout.
func (a *result) failed(err error, done time.Duration, timeout bool) {
	a.err, a.Error, a.Done = err, err.Error(), done
	a.Class = classOf(a.Status, false, true, timeout)
	a.Replayed, a.Size, a.BodySHA256 = false, 0, [32]byte{}
}

// headers holds request header maps for reuse: one is built for every
// attempt, and given back once its answer has been read.
var headers = sync.Pool{New: func() any { return make(http.Header, 8) }}

// contentTypeJSON is the Content-Type of a body whose headers name none.
var contentTypeJSON = []string{"application/json"}

// header returns the headers of an attempt for k: runner.base, the key's
// own from Config.HeaderFor, the Content-Type when there is a body and none
// was given, and the key; Host goes to the request instead. The values are
// shared by every attempt, read-only (net/http modifies none).
func (r *runner) header(k *keyRun) http.Header {
	h := headers.Get().(http.Header)
	maps.Copy(h, r.base)
	maps.Copy(h, k.extra)
	if len(k.body) > 0 && h.Get("Content-Type") == "" {
		h["Content-Type"] = contentTypeJSON
	}
	delete(h, "Host")
	h[r.keyHeader] = k.keyVal[:]
	return h
}

// putHeader gives back a map from header, once net/http is done with the
// request that carried it: after its response body was read and closed
// (not after an error: the transport may still be writing the request).
func putHeader(h http.Header) {
	clear(h)
	headers.Put(h)
}

// bodyReader is an attempt's request body: a reader of the key's bytes.
type bodyReader struct{ bytes.Reader }

// Close does nothing: the bytes are the key's, for its every attempt.
func (*bodyReader) Close() error { return nil }

func newBodyReader(b []byte) *bodyReader {
	br := &bodyReader{}
	br.Reset(b)
	return br
}

// newRequest builds an attempt's request for k with the header h, as
// http.NewRequest would but without parsing the URL again: the URL is
// shared by the attempts, read-only (net/http modifies it not).
func (r *runner) newRequest(ctx context.Context, k *keyRun, h http.Header) *http.Request {
	req := &http.Request{
		Method: r.cfg.Method, URL: r.target, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Host: r.target.Host, Body: http.NoBody, GetBody: noBody,
	}
	if k.host != "" {
		req.Host = k.host
	}
	if n := len(k.body); n > 0 {
		body := k.body
		req.ContentLength = int64(n)
		req.Body = newBodyReader(body)
		req.GetBody = func() (io.ReadCloser, error) { return newBodyReader(body), nil }
	}
	return req.WithContext(ctx)
}

// redactedURL renders u as client.Do's errors do: the password, if any,
// replaced by "***".
func redactedURL(u *url.URL) string {
	if _, ok := u.User.Password(); ok {
		return strings.Replace(u.String(), u.User.String()+"@", u.User.Username()+":***@", 1)
	}
	return u.String()
}

func noBody() (io.ReadCloser, error) { return http.NoBody, nil }

// sink takes in a response body: its SHA-256, its first snippetLen bytes
// and, for a problem document, up to maxProblemBytes+1 of it. Sinks are
// pooled, with their copy buffers, to keep the generator's work per attempt
// small.
type sink struct {
	h       hash.Hash
	buf     []byte
	snip    []byte
	problem []byte
	keep    bool // keep the problem document
}

var sinks = sync.Pool{New: func() any {
	return &sink{h: sha256.New(), buf: make([]byte, 16<<10), snip: make([]byte, 0, snippetLen)}
}}

func (s *sink) reset(problem bool) {
	s.h.Reset()
	s.snip = s.snip[:0]
	s.problem = s.problem[:0]
	s.keep = problem
	if !problem {
		s.problem = nil
	}
}

func (s *sink) Write(p []byte) (int, error) {
	s.h.Write(p)
	if room := snippetLen - len(s.snip); room > 0 {
		s.snip = append(s.snip, p[:min(room, len(p))]...)
	}
	if s.keep {
		if room := maxProblemBytes + 1 - len(s.problem); room > 0 {
			s.problem = append(s.problem, p[:min(room, len(p))]...)
		}
	}
	return len(p), nil
}

// wholeRunes returns b without a UTF-8 sequence cut short at its end (the
// snippet is the body's first snippetLen bytes, which may end in the
// middle of a rune); other bytes are left as they are.
func wholeRunes(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// isProblem reports whether a Content-Type is application/problem+json.
func isProblem(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/problem+json"
}
