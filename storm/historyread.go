package storm

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// maxHistoryLine bounds one line of a history or ledger file.
const maxHistoryLine = 1 << 20

// maxHistoryTime bounds the times a history holds (sent_ns, done_ns,
// scheduled_ns, ended_ns, the end's): no storm lasts 30 days, and a larger
// number is a corrupt file whose sums and differences would overflow.
const maxHistoryTime = 30 * 24 * time.Hour

// checkTime reports a time of a history outside 0 to maxHistoryTime.
func checkTime(name string, d time.Duration) error {
	if d < 0 || d > maxHistoryTime {
		return fmt.Errorf("%w: %s %d: want 0 to %d (30 days)", ErrHistory, name, int64(d), int64(maxHistoryTime))
	}
	return nil
}

// lineJSON is any line of a history file: the header has "history", the
// end "end", the counts "counts", an attempt "attempt", an operation "op"
// and none of those.
type lineJSON struct {
	History *int          `json:"history"`
	URL     string        `json:"url"`
	Method  string        `json:"method"`
	Started string        `json:"started"`
	Config  *settingsJSON `json:"config"`
	// CountsBefore is the header's.
	CountsBefore map[string]int64 `json:"counts_before"`
	Faults       []faultJSON      `json:"faults"`
	Events       []eventJSON      `json:"events"`

	Op          *int   `json:"op"`
	Key         string `json:"key"`
	Copy        int    `json:"copy"`
	Attempt     *int   `json:"attempt"`
	SentNS      int64  `json:"sent_ns"`
	DoneNS      int64  `json:"done_ns"`
	Class       Class  `json:"class"`
	Status      int    `json:"status"`
	Replayed    bool   `json:"replayed"`
	BodySHA256  string `json:"body_sha256"`
	Retried     bool   `json:"retried"`
	Probe       bool   `json:"probe"`
	Size        int64  `json:"size"`
	Snippet     string `json:"snippet"`
	Oversize    bool   `json:"oversize"`
	Error       string `json:"error"`
	ScheduledNS int64  `json:"scheduled_ns"`
	EndedNS     int64  `json:"ended_ns"`
	Late        bool   `json:"late"`

	End    *endJSON             `json:"end"`
	Counts map[string]countJSON `json:"counts"`
	ReadNS int64                `json:"read_ns"` // the counts line's

	// What parseFlat points Op and Attempt to, and unescapes into, so that
	// a line read costs no allocation of its own.
	opVal, attemptVal int
	scratch           []byte
	keyRaw            []byte            // the key, as the line's bytes, when Key is not set
	sum               [sha256.Size]byte // the body's digest, when hasSum
	hasSum            bool
}

type endJSON struct {
	ElapsedNS      int64       `json:"elapsed_ns"`
	ProbeElapsedNS int64       `json:"probe_elapsed_ns"`
	Interrupted    bool        `json:"interrupted"`
	Error          string      `json:"error"`
	Faults         []faultJSON `json:"faults"`
	Events         []eventJSON `json:"events"`
}

type countJSON struct {
	Before int64  `json:"before"`
	After  *int64 `json:"after"`
	Error  string `json:"error"`
}

// lines calls fn with every non-blank line of r and its number. A last
// line without its newline that is not valid JSON is a write cut short
// (the storm was killed): fn is not called for it, and truncated reports
// it.
func lines(r io.Reader, fn func(n int, line []byte) error) (truncated bool, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) && len(long) <= maxHistoryLine {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			if len(long) > maxHistoryLine {
				return false, fmt.Errorf("line %d: longer than %d bytes", n, maxHistoryLine)
			}
			line = long
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return false, err
		}
		eof := err != nil
		if eof && len(bytes.TrimSpace(line)) > 0 && !json.Valid(line) {
			return true, nil
		}
		if t := bytes.TrimSpace(line); len(t) > 0 {
			if err := fn(n, t); err != nil {
				return false, fmt.Errorf("line %d: %w", n, err)
			}
		}
		if eof {
			return false, nil
		}
	}
}

// ReadHistory reads a history file (Config.History's, --history's)
// from r. A history whose last line was cut short, or that has no end
// line, is read as far as it goes with End nil: Check judges it as an
// interrupted run. It returns an error wrapping ErrHistory for anything
// else that is not a history of a version it reads, and the reader's
// errors.
func ReadHistory(r io.Reader) (*History, error) {
	h := &History{}
	byOp := map[int]int{} // op -> index in h.Operations
	seenHeader := false
	var buf lineJSON
	_, err := lines(r, func(n int, line []byte) error {
		l := &buf
		scratch := l.scratch
		*l = lineJSON{scratch: scratch}
		if !seenHeader || !bytes.HasPrefix(line, []byte(`{"op":`)) || !parseFlat(line, l) {
			*l = lineJSON{scratch: scratch}
			if err := json.Unmarshal(line, l); err != nil {
				return fmt.Errorf("%w: %v", ErrHistory, err)
			}
		}
		if !seenHeader {
			if l.History == nil || l.Config == nil {
				return fmt.Errorf("%w: the first line is not a history header", ErrHistory)
			}
			seenHeader = true
			if err := readHeader(h, l); err != nil {
				return err
			}
			h.Operations = make([]Operation, 0, min(h.Header.Settings.Keys, 1<<20))
			return nil
		}
		switch {
		case l.History != nil:
			return fmt.Errorf("%w: a second header", ErrHistory)
		case l.End != nil:
			if h.End != nil {
				return fmt.Errorf("%w: a second end line", ErrHistory)
			}
			h.End = &End{Elapsed: time.Duration(l.End.ElapsedNS), ProbeElapsed: time.Duration(l.End.ProbeElapsedNS),
				Interrupted: l.End.Interrupted, Error: l.End.Error, Faults: faultsOf(l.End.Faults), Events: eventsOf(l.End.Events)}
			if err := firstError(checkTime("elapsed_ns", h.End.Elapsed), checkTime("probe_elapsed_ns", h.End.ProbeElapsed)); err != nil {
				return err
			}
		case l.Counts != nil:
			if err := checkTime("read_ns", time.Duration(l.ReadNS)); err != nil {
				return err
			}
			h.Counts = map[string]CountReading{}
			for field, c := range l.Counts {
				cr := CountReading{Before: c.Before, Error: c.Error, At: time.Duration(l.ReadNS)}
				if c.After != nil {
					cr.After, cr.Read = *c.After, true
				}
				h.Counts[field] = cr
			}
		case l.Op != nil:
			return readOpLine(h, byOp, l)
		default:
			return fmt.Errorf("%w: neither an attempt, an operation, the end nor the counts", ErrHistory)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !seenHeader {
		return nil, fmt.Errorf("%w: empty", ErrHistory)
	}
	slices.SortFunc(h.Operations, func(a, b Operation) int { return a.Op - b.Op })
	return h, nil
}

func readHeader(h *History, l *lineJSON) error {
	if *l.History != HistoryVersion {
		return fmt.Errorf("%w: version %d; this idemkey reads version %d", ErrHistory, *l.History, HistoryVersion)
	}
	started, err := time.Parse(time.RFC3339Nano, l.Started)
	if err != nil {
		return fmt.Errorf("%w: started: %v", ErrHistory, err)
	}
	hj := headerJSON{History: *l.History, URL: l.URL, Method: l.Method, Config: *l.Config, CountsBefore: l.CountsBefore,
		Faults: l.Faults, Events: l.Events}
	h.Header = hj.header()
	h.Header.Started = started
	s := h.Header.Settings
	switch {
	case s.Mode != modeBurst && s.Mode != modeLoad:
		return fmt.Errorf("%w: mode %q", ErrHistory, s.Mode)
	case s.Keys < 1 || s.Dups < 1:
		return fmt.Errorf("%w: keys and dups must be at least 1", ErrHistory)
	case int64(s.Keys)*int64(s.Dups) > maxRequests:
		return fmt.Errorf("%w: keys x dups over %d", ErrHistory, maxRequests)
	case s.Timeout < 0:
		return fmt.Errorf("%w: negative timeout", ErrHistory)
	}
	for _, c := range s.Counts {
		if c.Field == "" || c.Want < 0 {
			return fmt.Errorf("%w: count %q: want a name and a number at least 0", ErrHistory, c.Field)
		}
	}
	return nil
}

// readOpLine adds an attempt or an operation line to h.
func readOpLine(h *History, byOp map[int]int, l *lineJSON) error {
	s := h.Header.Settings
	op := *l.Op
	if op < 0 || op >= s.Keys {
		return fmt.Errorf("%w: op %d outside 0 to %d", ErrHistory, op, s.Keys-1)
	}
	i, ok := byOp[op]
	if l.keyRaw != nil {
		if ok && string(l.keyRaw) == h.Operations[i].Key {
			l.Key = h.Operations[i].Key // one string for every attempt of the operation
		} else {
			l.Key = string(l.keyRaw)
		}
	}
	if !ok {
		i = len(h.Operations)
		byOp[op] = i
		h.Operations = append(h.Operations, Operation{Op: op, Key: l.Key})
	}
	o := &h.Operations[i]
	if o.Key != l.Key {
		return fmt.Errorf("%w: op %d has key %q, and %q before", ErrHistory, op, l.Key, o.Key)
	}
	if l.Attempt == nil {
		o.Scheduled, o.Ended, o.Late = time.Duration(l.ScheduledNS), time.Duration(l.EndedNS), l.Late
		return firstError(checkTime("scheduled_ns", o.Scheduled), checkTime("ended_ns", o.Ended))
	}
	a := Attempt{Op: op, Key: l.Key, Copy: l.Copy, Attempt: *l.Attempt, Sent: time.Duration(l.SentNS), Done: time.Duration(l.DoneNS),
		Class: l.Class, Status: l.Status, Replayed: l.Replayed, Retried: l.Retried, Probe: l.Probe, Size: l.Size,
		Snippet: l.Snippet, Oversize: l.Oversize, Error: l.Error}
	switch {
	case a.Attempt < 1:
		return fmt.Errorf("%w: attempt %d: they count from 1", ErrHistory, a.Attempt)
	case a.Copy < 0 || a.Copy >= s.Dups:
		return fmt.Errorf("%w: copy %d outside 0 to %d", ErrHistory, a.Copy, s.Dups-1)
	case !slices.Contains(classes, a.Class):
		return fmt.Errorf("%w: class %q", ErrHistory, a.Class)
	case a.Sent < 0 || a.Done < a.Sent || a.Done > maxHistoryTime:
		return fmt.Errorf("%w: sent_ns %d, done_ns %d: want 0 <= sent <= done <= %d (30 days)", ErrHistory, a.Sent, a.Done, int64(maxHistoryTime))
	case a.Status < 0 || a.Status > 999:
		return fmt.Errorf("%w: status %d", ErrHistory, a.Status)
	}
	if l.hasSum {
		a.BodySHA256 = l.sum
	} else if l.BodySHA256 != "" {
		if n, err := hex.Decode(a.BodySHA256[:], []byte(l.BodySHA256)); err != nil || n != len(a.BodySHA256) || len(l.BodySHA256) != 2*n {
			return fmt.Errorf("%w: body_sha256 %q: want 64 hex digits", ErrHistory, l.BodySHA256)
		}
	}
	o.Attempts = append(o.Attempts, a)
	return nil
}

// firstError returns the first error that is not nil.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// flexString is a JSON string or number, kept as its text.
type flexString string

func (f *flexString) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*f = flexString(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("want a string or a number, got %s", b)
	}
	*f = flexString(n.String())
	return nil
}

// ReadLedger reads a ledger: JSON Lines, one object per side effect the
// service made, {"key": …, "effect": "charge"} and optionally
// "execution", "attempt", "token" (strings or numbers), "refused",
// "not_stored", and "start" and "end" (RFC 3339; see Effect). A JSON
// object without a usable key (none, not a string) or with a member of
// the wrong type is kept as a malformed effect, its Key empty: Check
// counts it (LedgerSummary.Malformed) and the verdict is inconclusive. It
// returns an error wrapping ErrHistory for a line that is not a JSON
// object (the file is not a ledger, or was cut short), and the reader's
// errors.
func ReadLedger(r io.Reader) ([]Effect, error) {
	var out []Effect
	truncated, err := lines(r, func(n int, line []byte) error {
		var e struct {
			Key       *string    `json:"key"`
			Effect    string     `json:"effect"`
			Execution flexString `json:"execution"`
			Attempt   int        `json:"attempt"`
			Token     flexString `json:"token"`
			Refused   bool       `json:"refused"`
			NotStored bool       `json:"not_stored"`
			Start     time.Time  `json:"start"`
			End       time.Time  `json:"end"`
		}
		if err := json.Unmarshal(line, &e); err != nil || e.Key == nil {
			var obj map[string]json.RawMessage
			if json.Unmarshal(line, &obj) != nil {
				if err == nil {
					err = errors.New("not an object")
				}
				return fmt.Errorf("%w: ledger: %v", ErrHistory, err)
			}
			out = append(out, Effect{}) // malformed: no usable key
			return nil
		}
		out = append(out, Effect{Key: *e.Key, Effect: e.Effect, Execution: string(e.Execution), Attempt: e.Attempt,
			Token: string(e.Token), Refused: e.Refused, NotStored: e.NotStored, Start: e.Start, End: e.End})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if truncated {
		return nil, fmt.Errorf("%w: ledger: its last line is cut short", ErrHistory)
	}
	return out, nil
}

// MergeHistories returns the histories of several storms run at once (one
// per load generator) as one, to be judged together: each history's times
// are shifted by the difference between its Header.Started and the
// earliest (the machines' wall clocks, which must agree), its operations
// renumbered after the previous histories', and keys, rates, in-flight
// bounds and workers added up; the schedule ends with the last one's.
// The merged settings are otherwise the first history's, its thresholds
// included. A count is read before by the history that started first and
// after by the one that ended last, so that the reading brackets every
// storm. The histories must agree on the mode, the copies per key, the
// timeout and the probe; otherwise MergeHistories returns an error
// wrapping ErrHistory. The inputs are not modified.
func MergeHistories(hs ...*History) (*History, error) {
	if len(hs) == 0 {
		return nil, fmt.Errorf("%w: nothing to merge", ErrHistory)
	}
	first := hs[0].Header
	t0 := first.Started
	for i, h := range hs {
		s, f := h.Header.Settings, first.Settings
		if s.Mode != f.Mode || s.Dups != f.Dups || s.Timeout != f.Timeout || s.Probe != f.Probe {
			return nil, fmt.Errorf("%w: history %d differs from the first in its mode, dups, timeout or probe", ErrHistory, i+1)
		}
		if h.Header.Started.Before(t0) {
			t0 = h.Header.Started
		}
	}
	for i, h := range hs {
		if h.Header.Started.Sub(t0) > maxHistoryTime {
			return nil, fmt.Errorf("%w: history %d started over 30 days after the earliest", ErrHistory, i+1)
		}
	}
	m := &History{Header: first}
	m.Header.Started = t0
	m.Header.Settings.Keys, m.Header.Settings.Rate, m.Header.Settings.MaxInFlight, m.Header.Settings.Concurrency = 0, 0, 0, 0
	m.Header.Settings.Stages = nil // the schedules are the histories', each from its own start
	m.End = &End{}
	base := 0
	var firstStart, lastEnd *History
	var lastEndAt time.Duration
	for _, h := range hs {
		off := h.Header.Started.Sub(t0)
		s := h.Header.Settings
		ms := &m.Header.Settings
		ms.Keys += s.Keys
		ms.Rate += s.Rate
		ms.MaxInFlight += s.MaxInFlight
		ms.Concurrency += s.Concurrency
		ms.Duration = max(ms.Duration, off+s.Duration)
		for _, op := range h.Operations {
			op.Op += base
			op.Scheduled += off
			op.Ended += off
			attempts := make([]Attempt, len(op.Attempts))
			for j, a := range op.Attempts {
				a.Op += base
				a.Sent += off
				a.Done += off
				attempts[j] = a
			}
			op.Attempts = attempts
			m.Operations = append(m.Operations, op)
		}
		base += s.Keys
		if h.End == nil {
			m.End = nil
		} else if m.End != nil {
			m.End.Elapsed = max(m.End.Elapsed, off+h.End.Elapsed)
			m.End.ProbeElapsed = max(m.End.ProbeElapsed, h.End.ProbeElapsed)
			m.End.Interrupted = m.End.Interrupted || h.End.Interrupted
			if m.End.Error == "" {
				m.End.Error = h.End.Error
			}
			if end := off + h.End.Elapsed + h.End.ProbeElapsed; lastEnd == nil || end > lastEndAt {
				lastEnd, lastEndAt = h, end
			}
		}
		if firstStart == nil || h.Header.Started.Before(firstStart.Header.Started) {
			firstStart = h
		}
		m.Ledger = append(m.Ledger, h.Ledger...)
	}
	m.Header.CountsBefore = firstStart.Header.CountsBefore
	if firstStart.Counts != nil {
		m.Counts = map[string]CountReading{}
		for _, f := range m.Header.Settings.Counts {
			before, ok := firstStart.Counts[f.Field]
			if !ok {
				continue
			}
			r := CountReading{Before: before.Before, Error: "not read after the storm that ended last"}
			if lastEnd != nil {
				if after, ok := lastEnd.Counts[f.Field]; ok {
					r.After, r.Read, r.Error, r.At = after.After, after.Read, after.Error, after.At
					if r.At > 0 {
						r.At += lastEnd.Header.Started.Sub(t0)
					}
				}
			}
			m.Counts[f.Field] = r
		}
	}
	return m, nil
}
