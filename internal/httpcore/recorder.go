package httpcore

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"slices"
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
	committed bool        // the head is fixed: snap holds the headers
	snap      snapshot    // the headers as Commit found them
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
	if rec.committed {
		return
	}
	rec.SetStatus(code)
	rec.Commit()
}

// Write commits the headers with status 200 if none was set, then records p.
func (rec *Recorder) Write(p []byte) (int, error) {
	if !rec.committed {
		rec.Commit()
	}
	return rec.WriteBody(p)
}

// SetStatus sets the status to send, until Commit. It panics on a status
// net/http refuses (under 100 or over 999).
func (rec *Recorder) SetStatus(code int) {
	checkStatus(code)
	if !rec.committed && code >= 200 {
		rec.status = code
		rec.statusSet = true
	}
}

// Untouched reports whether the handler has written nothing: no status, no
// header commit, no body.
func (rec *Recorder) Untouched() bool { return !rec.committed && !rec.statusSet && rec.size == 0 }

// Status returns the response status: 200 unless set.
func (rec *Recorder) Status() int { return rec.status }

// Size returns the number of body bytes the handler wrote.
func (rec *Recorder) Size() int { return rec.size }

// Committed reports whether the status and headers are fixed.
func (rec *Recorder) Committed() bool { return rec.committed }

// Commit fixes the status and takes the snapshot of the headers that is sent
// and stored. Later calls do nothing.
func (rec *Recorder) Commit() {
	if !rec.committed {
		rec.snap.take(rec.w.Header())
		rec.committed = true
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
	rec.writeHead(true)
	if rec.oversize {
		_, err := rec.w.Write(rec.body)
		return err
	}
	_, err := rec.w.Write(rec.body)
	return err
}

// writeHead sends the committed status and headers: the header map is
// reset to the snapshot, so changes the handler made after committing are
// dropped, as net/http would. live says the handler is still running (a
// stream) and may change the map's values in place: it gets copies, so the
// snapshot stays what was sent and is stored.
func (rec *Recorder) writeHead(live bool) {
	h := rec.w.Header()
	for k := range h {
		if _, ok := rec.snap.get(k); !ok {
			delete(h, k)
		}
	}
	for _, f := range rec.snap.fields {
		if live && f.vals != nil {
			h[f.name] = slices.Clone(f.vals)
		} else {
			h[f.name] = f.vals
		}
	}
	rec.w.WriteHeader(rec.status)
}

// flushHeld sends a response that was held back: head, body and trailers.
func (rec *Recorder) flushHeld() {
	if rec.streaming || rec.hijacked {
		return
	}
	trailers := rec.trailers()
	rec.writeHead(false)
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
	declared, _ := rec.snap.get("Trailer")
	for _, names := range declared {
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

// storedHeader returns the headers to store, sorted by name: the snapshot
// without omitted headers (whatever the case of their names) and without
// those outer middleware set before the handler ran.
func (rec *Recorder) storedHeader() []hfield {
	fs := rec.snap.fields
	for i, f := range fs {
		if rec.omitted(f.name) || equal(rec.before[f.name], f.vals) {
			// Something to leave out: a copy without it.
			kept := append(make([]hfield, 0, len(fs)-1), fs[:i]...)
			for _, f := range fs[i+1:] {
				if !rec.omitted(f.name) && !equal(rec.before[f.name], f.vals) {
					kept = append(kept, f)
				}
			}
			return kept
		}
	}
	return fs // the common case: nothing to leave out, no copy
}

// snapshot is the response headers as Commit found them, sorted by name,
// copied into storage inside the recorder: a handful of headers costs no
// allocation (http.Header.Clone makes a map and a slice). A header with a
// nil value (which tells net/http to leave it out, as Date) keeps it nil.
type snapshot struct {
	fields []hfield
	flat   []string // the values' storage
	field0 [8]hfield
	flat0  [8]string
}

// take copies h.
func (s *snapshot) take(h http.Header) {
	s.fields, s.flat = s.field0[:0], s.flat0[:0]
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	if n > len(s.flat0) {
		s.flat = make([]string, 0, n)
	}
	for k, vs := range h {
		if vs != nil {
			start := len(s.flat)
			s.flat = append(s.flat, vs...)
			vs = s.flat[start:len(s.flat):len(s.flat)] // an append to it copies
		}
		s.fields = append(s.fields, hfield{k, vs})
	}
	sortFields(s.fields)
}

// get returns the values of header k, as it was written in the map.
func (s *snapshot) get(k string) ([]string, bool) {
	i, ok := slices.BinarySearchFunc(s.fields, k, func(f hfield, k string) int { return strings.Compare(f.name, k) })
	if !ok {
		return nil, false
	}
	return s.fields[i].vals, true
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
