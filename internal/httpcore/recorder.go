package httpcore

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// Recorder stands in for the handler's http.ResponseWriter. It holds the
// response back until the outcome is stored, so that a client never sees a
// response whose replay is not yet in Redis, and keeps a copy for the record.
// Two things send bytes early: the handler flushing (streaming), and a body
// larger than MaxResponseBytes; the copy then stops at the limit.
//
// Recorder is a ResponseWriter with net/http semantics: the first
// WriteHeader or Write fixes the status and headers. An adapter with other
// semantics (Gin defers WriteHeader to the first Write) drives SetStatus and
// Commit itself.
type Recorder struct {
	w         http.ResponseWriter
	before    http.Header // the headers outer middleware set before the handler ran
	header    http.Header // snapshot taken at Commit; nil before
	status    int
	body      []byte
	size      int
	max       int
	omit      map[string]bool // canonical names of headers never stored
	statusSet bool            // the handler chose a status
	streaming bool            // the head and some body went out already
	oversize  bool
	hijacked  bool
}

// init readies rec to record for w.
func (rec *Recorder) init(w http.ResponseWriter, max int, omit map[string]bool) {
	var before http.Header
	if h := w.Header(); len(h) > 0 {
		before = h.Clone()
	}
	*rec = Recorder{w: w, before: before, status: http.StatusOK, max: max, omit: omit}
}

// checkStatus panics on a status net/http refuses, as net/http does, so that
// the handler fails (and the key is released) rather than a 200 being stored.
func checkStatus(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
}

// Header returns the header map of the underlying writer.
func (rec *Recorder) Header() http.Header { return rec.w.Header() }

// WriteHeader records the status and commits the headers, as net/http does.
// Informational (1xx) statuses go straight out and fix nothing.
func (rec *Recorder) WriteHeader(code int) {
	checkStatus(code)
	if code >= 100 && code < 200 {
		rec.w.WriteHeader(code)
		return
	}
	if rec.header != nil {
		return
	}
	rec.SetStatus(code)
	rec.Commit()
}

// Write commits the headers with status 200 if none was set, then records p.
func (rec *Recorder) Write(p []byte) (int, error) {
	if rec.header == nil {
		rec.Commit()
	}
	return rec.WriteBody(p)
}

// SetStatus sets the status to send, until Commit. It panics on a status
// net/http refuses (under 100 or over 999).
func (rec *Recorder) SetStatus(code int) {
	checkStatus(code)
	if rec.header == nil && code >= 200 {
		rec.status = code
		rec.statusSet = true
	}
}

// Untouched reports whether the handler has written nothing: no status, no
// header commit, no body.
func (rec *Recorder) Untouched() bool { return rec.header == nil && !rec.statusSet && rec.size == 0 }

// Status returns the response status: 200 unless set.
func (rec *Recorder) Status() int { return rec.status }

// Size returns the number of body bytes the handler wrote.
func (rec *Recorder) Size() int { return rec.size }

// Committed reports whether the status and headers are fixed.
func (rec *Recorder) Committed() bool { return rec.header != nil }

// Commit fixes the status and takes the snapshot of the headers that is sent
// and stored. Later calls do nothing.
func (rec *Recorder) Commit() {
	if rec.header == nil {
		rec.header = rec.w.Header().Clone()
		if rec.header == nil {
			rec.header = http.Header{}
		}
	}
}

// WriteBody records body bytes; the head must be committed.
func (rec *Recorder) WriteBody(p []byte) (int, error) {
	rec.size += len(p)
	if !rec.oversize {
		if len(rec.body)+len(p) <= rec.max {
			rec.body = append(rec.body, p...)
		} else {
			// Too big to keep: send what we hold and stream the rest.
			rec.oversize = true
			if !rec.streaming {
				if err := rec.startStreaming(); err != nil {
					return 0, err
				}
			}
			rec.body = nil
		}
	}
	if rec.streaming {
		return rec.w.Write(p)
	}
	return len(p), nil
}

// Flush sends the head and the body so far, and streams the rest.
func (rec *Recorder) Flush() {
	rec.Commit()
	if !rec.streaming {
		if rec.startStreaming() != nil {
			return
		}
	}
	_ = http.NewResponseController(rec.w).Flush()
}

// Hijack hands the connection over, as http.Hijacker; a hijacked exchange
// stores no outcome.
func (rec *Recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(rec.w).Hijack()
	if err == nil {
		rec.hijacked = true
	}
	return c, brw, err
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (rec *Recorder) Unwrap() http.ResponseWriter { return rec.w }

// startStreaming writes the head and the buffered body to the client.
func (rec *Recorder) startStreaming() error {
	rec.streaming = true
	rec.writeHead()
	if rec.oversize {
		_, err := rec.w.Write(rec.body)
		return err
	}
	_, err := rec.w.Write(rec.body)
	return err
}

// writeHead sends the committed status and headers: the header map is
// reset to the snapshot, so changes the handler made after committing are
// dropped, as net/http would.
func (rec *Recorder) writeHead() {
	h := rec.w.Header()
	for k := range h {
		if _, ok := rec.header[k]; !ok {
			delete(h, k)
		}
	}
	for k, v := range rec.header {
		h[k] = v
	}
	rec.w.WriteHeader(rec.status)
}

// flushHeld sends a response that was held back: head, body and trailers.
func (rec *Recorder) flushHeld() {
	if rec.streaming || rec.hijacked {
		return
	}
	trailers := rec.trailers()
	rec.writeHead()
	if len(rec.body) > 0 {
		_, _ = rec.w.Write(rec.body)
	}
	if len(trailers) > 0 {
		h := rec.w.Header()
		for k, v := range trailers {
			h[k] = v
		}
	}
}

// trailers returns the trailer values the handler set: those it declared
// in the Trailer header before committing, and those with
// http.TrailerPrefix. They reach the first client; they are not stored, so
// replays carry none.
func (rec *Recorder) trailers() http.Header {
	h := rec.w.Header()
	var t http.Header
	for _, names := range rec.header["Trailer"] {
		for name := range strings.SplitSeq(names, ",") {
			name = http.CanonicalHeaderKey(strings.TrimSpace(name))
			if v, ok := h[name]; ok && name != "" {
				if t == nil {
					t = http.Header{}
				}
				t[name] = v
			}
		}
	}
	for k, v := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			if t == nil {
				t = http.Header{}
			}
			t[k] = v
		}
	}
	return t
}

// storedHeader returns the headers to store: the snapshot without omitted
// headers (whatever the case of their names) and without those outer
// middleware set before the handler ran.
func (rec *Recorder) storedHeader() http.Header {
	keep := true
	for k, v := range rec.header {
		if rec.omitted(k) || equal(rec.before[k], v) {
			keep = false
			break
		}
	}
	if keep {
		return rec.header // the common case: nothing to leave out, no copy
	}
	h := make(http.Header, len(rec.header))
	for k, v := range rec.header {
		if rec.omitted(k) || equal(rec.before[k], v) {
			continue
		}
		h[k] = v
	}
	return h
}

// omitted reports whether header k is never stored: a name set directly in
// the map need not be canonical, and trailer values never are stored.
func (rec *Recorder) omitted(k string) bool {
	if rec.omit[k] || strings.HasPrefix(k, http.TrailerPrefix) {
		return true
	}
	if c := http.CanonicalHeaderKey(k); c != k {
		return rec.omit[c]
	}
	return false
}

// equal reports whether a header's values a and b are the same, with a
// header that was never set (a == nil) equal to nothing: storedHeader drops
// only headers outer middleware set before the handler ran.
func equal(a, b []string) bool {
	if len(a) != len(b) || a == nil {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
