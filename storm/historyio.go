package storm

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// The history file: JSON Lines, written as the storm goes, one line per
// attempt once the storm knows whether it retried it, one per operation
// once it has ended, through a buffer of fixed size (historyBufSize), so
// that writing a history costs no memory that grows with the run. The
// lines are built by hand (appendAttempt): an attempt's line is on the
// generator's path. storm/README.md documents the format field by field.

// historyBufSize is the history writer's buffer.
const historyBufSize = 64 << 10

// ErrHistory is wrapped by the errors about a history: Run's when
// Config.History could not be written (the report is still returned),
// ReadHistory's for a file that is not a history, MergeHistories' for
// histories that cannot be judged together.
var ErrHistory = errors.New("storm history")

// historyWriter streams a history. It is safe for concurrent use; a write
// error stops it, and is returned by close.
type historyWriter struct {
	mu   sync.Mutex
	w    *bufio.Writer
	line []byte
	err  error
}

func newHistoryWriter(w io.Writer) *historyWriter {
	return &historyWriter{w: bufio.NewWriterSize(w, historyBufSize), line: make([]byte, 0, 512)}
}

// emit writes one line built by build into the writer's scratch buffer.
func (hw *historyWriter) emit(build func([]byte) []byte) {
	if hw == nil {
		return
	}
	hw.mu.Lock()
	defer hw.mu.Unlock()
	if hw.err != nil {
		return
	}
	hw.line = append(build(hw.line[:0]), '\n')
	_, hw.err = hw.w.Write(hw.line)
}

// close flushes the writer and returns its first error.
func (hw *historyWriter) close() error {
	if hw == nil {
		return nil
	}
	hw.mu.Lock()
	defer hw.mu.Unlock()
	if hw.err == nil {
		hw.err = hw.w.Flush()
	}
	return hw.err
}

func (hw *historyWriter) header(h *Header) {
	b, err := json.Marshal(headerJSONOf(h))
	if err != nil { // cannot happen: plain fields
		panic(err)
	}
	hw.emit(func(line []byte) []byte { return append(line, b...) })
}

func (hw *historyWriter) attempt(a *Attempt) {
	hw.emit(func(b []byte) []byte { return appendAttempt(b, a) })
}

func (hw *historyWriter) operation(op *Operation, load bool) {
	hw.emit(func(b []byte) []byte { return appendOperation(b, op, load) })
}

func (hw *historyWriter) end(e *End, counts map[string]CountReading, fields []CountSpec) {
	hw.emit(func(b []byte) []byte { return appendEnd(b, e) })
	if counts != nil {
		hw.emit(func(b []byte) []byte { return appendCounts(b, counts, fields) })
	}
}

// WriteTo writes h to w in the history file's format (JSON Lines: the
// header, then each operation's attempts and the operation, then the end
// and the counts), which ReadHistory reads back as it was. It returns the
// bytes written and the first error.
func (h *History) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	hw := newHistoryWriter(cw)
	hw.header(&h.Header)
	load := h.Header.Settings.Mode == modeLoad
	for i := range h.Operations {
		op := &h.Operations[i]
		for j := range op.Attempts {
			hw.attempt(&op.Attempts[j])
		}
		hw.operation(op, load)
	}
	if h.End != nil {
		hw.end(h.End, h.Counts, h.Header.Settings.Counts)
	}
	err := hw.close()
	return cw.n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func appendAttempt(b []byte, a *Attempt) []byte {
	b = append(b, `{"op":`...)
	b = strconv.AppendInt(b, int64(a.Op), 10)
	b = append(b, `,"key":`...)
	b = appendJSONString(b, a.Key)
	b = append(b, `,"copy":`...)
	b = strconv.AppendInt(b, int64(a.Copy), 10)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(a.Attempt), 10)
	b = append(b, `,"sent_ns":`...)
	b = strconv.AppendInt(b, int64(a.Sent), 10)
	b = append(b, `,"done_ns":`...)
	b = strconv.AppendInt(b, int64(a.Done), 10)
	b = append(b, `,"class":"`...)
	b = append(b, a.Class...)
	b = append(b, `","status":`...)
	b = strconv.AppendInt(b, int64(a.Status), 10)
	b = append(b, `,"replayed":`...)
	b = strconv.AppendBool(b, a.Replayed)
	b = append(b, `,"body_sha256":"`...)
	if a.Class.Answered() {
		b = hex.AppendEncode(b, a.BodySHA256[:])
	}
	b = append(b, `","retried":`...)
	b = strconv.AppendBool(b, a.Retried)
	b = append(b, `,"probe":`...)
	b = strconv.AppendBool(b, a.Probe)
	if a.Class.Answered() {
		b = append(b, `,"size":`...)
		b = strconv.AppendInt(b, a.Size, 10)
	}
	if a.Snippet != "" {
		b = append(b, `,"snippet":`...)
		b = appendJSONString(b, a.Snippet)
	}
	if a.Oversize {
		b = append(b, `,"oversize":true`...)
	}
	if a.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, a.Error)
	}
	return append(b, '}')
}

func appendOperation(b []byte, op *Operation, load bool) []byte {
	b = append(b, `{"op":`...)
	b = strconv.AppendInt(b, int64(op.Op), 10)
	b = append(b, `,"key":`...)
	b = appendJSONString(b, op.Key)
	if load {
		b = append(b, `,"scheduled_ns":`...)
		b = strconv.AppendInt(b, int64(op.Scheduled), 10)
		b = append(b, `,"ended_ns":`...)
		b = strconv.AppendInt(b, int64(op.Ended), 10)
		b = append(b, `,"late":`...)
		b = strconv.AppendBool(b, op.Late)
	}
	return append(b, '}')
}

func appendEnd(b []byte, e *End) []byte {
	b = append(b, `{"end":{"elapsed_ns":`...)
	b = strconv.AppendInt(b, int64(e.Elapsed), 10)
	b = append(b, `,"probe_elapsed_ns":`...)
	b = strconv.AppendInt(b, int64(e.ProbeElapsed), 10)
	b = append(b, `,"interrupted":`...)
	b = strconv.AppendBool(b, e.Interrupted)
	if e.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, e.Error)
	}
	b = appendIncident(b, e.Faults, e.Events)
	return append(b, "}}"...)
}

func appendCounts(b []byte, counts map[string]CountReading, fields []CountSpec) []byte {
	b = append(b, `{"counts":{`...)
	first := true
	var at time.Duration // one GET read them all
	for _, f := range fields {
		c, ok := counts[f.Field]
		if !ok {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendJSONString(b, f.Field)
		b = append(b, `:{"before":`...)
		b = strconv.AppendInt(b, c.Before, 10)
		if c.Read {
			b = append(b, `,"after":`...)
			b = strconv.AppendInt(b, c.After, 10)
		}
		if c.Error != "" {
			b = append(b, `,"error":`...)
			b = appendJSONString(b, c.Error)
		}
		b = append(b, '}')
		at = max(at, c.At)
	}
	b = append(b, '}')
	if at > 0 {
		b = append(b, `,"read_ns":`...)
		b = strconv.AppendInt(b, int64(at), 10)
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes
// U+FFFD, as encoding/json writes it.
func appendJSONString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// headerJSON is the history's first line.
type headerJSON struct {
	History int          `json:"history"`
	URL     string       `json:"url"`
	Method  string       `json:"method"`
	Started string       `json:"started"`
	Config  settingsJSON `json:"config"`
	// CountsBefore is an addition to the format: the counts read before
	// the storm, also in the counts line at the end.
	CountsBefore map[string]int64 `json:"counts_before,omitempty"`
	// Faults and Events are an addition: the incident's schedule.
	Faults []faultJSON `json:"faults,omitempty"`
	Events []eventJSON `json:"events,omitempty"`
}

type settingsJSON struct {
	Mode                  string          `json:"mode"`
	KeyHeader             string          `json:"key_header"`
	Keys                  int             `json:"keys"`
	Dups                  int             `json:"dups"`
	Concurrency           int             `json:"concurrency"`
	TimeoutNS             int64           `json:"timeout_ns"`
	Retry                 bool            `json:"retry"`
	MaxRetries            int             `json:"max_retries"`
	Probe                 bool            `json:"probe"`
	Rate                  float64         `json:"rate,omitempty"`
	DurationNS            int64           `json:"duration_ns,omitempty"`
	MaxInFlight           int             `json:"max_in_flight,omitempty"`
	AttemptTimeoutNS      int64           `json:"attempt_timeout_ns,omitempty"`
	Retries               int             `json:"retries,omitempty"`
	BackoffMinNS          int64           `json:"backoff_min_ns,omitempty"`
	BackoffMaxNS          int64           `json:"backoff_max_ns,omitempty"`
	Stages                []stageJSON     `json:"stages,omitempty"`
	CountURL              string          `json:"count_url,omitempty"`
	Counts                []countSpecJSON `json:"counts,omitempty"`
	MaxP99NS              int64           `json:"max_p99_ns,omitempty"`
	MaxAmplification      float64         `json:"max_amplification,omitempty"`
	MinGoodput            float64         `json:"min_goodput,omitempty"`
	MinExactlyOnceGoodput float64         `json:"min_exactly_once_goodput,omitempty"`
	MaxPeakAmplification  float64         `json:"max_peak_amplification,omitempty"`
	MaxFailures           int             `json:"max_failures"`
	Policy                string          `json:"policy,omitempty"`
	MaxRecoveryNS         int64           `json:"max_recovery_ns,omitempty"`
	SettleNS              int64           `json:"settle_ns,omitempty"`
}

type countSpecJSON struct {
	Field string `json:"field"`
	Want  int    `json:"want"`
}

func headerJSONOf(h *Header) headerJSON {
	s := h.Settings
	j := headerJSON{History: h.Version, URL: h.URL, Method: h.Method, Started: h.Started.UTC().Format(time.RFC3339Nano),
		CountsBefore: h.CountsBefore, Faults: faultsJSON(h.Faults), Events: eventsJSON(h.Events),
		Config: settingsJSON{
			Mode: s.Mode, KeyHeader: s.KeyHeader, Keys: s.Keys, Dups: s.Dups, Concurrency: s.Concurrency,
			TimeoutNS: int64(s.Timeout), Retry: s.Retry, MaxRetries: s.MaxRetries, Probe: s.Probe,
			Rate: s.Rate, DurationNS: int64(s.Duration), MaxInFlight: s.MaxInFlight, AttemptTimeoutNS: int64(s.AttemptTimeout),
			Retries: s.Retries, BackoffMinNS: int64(s.BaseDelay), BackoffMaxNS: int64(s.MaxDelay), CountURL: s.CountURL,
			MaxP99NS: int64(s.MaxP99), MaxAmplification: s.MaxAmplification, MinGoodput: s.MinGoodput,
			MinExactlyOnceGoodput: s.MinExactlyOnceGoodput, MaxPeakAmplification: s.MaxPeakAmplification,
			MaxFailures: s.MaxFailures, Policy: s.Policy, MaxRecoveryNS: int64(s.MaxRecovery), SettleNS: int64(s.Settle),
		}}
	for _, c := range s.Counts {
		j.Config.Counts = append(j.Config.Counts, countSpecJSON(c))
	}
	for _, st := range s.Stages {
		j.Config.Stages = append(j.Config.Stages, stageJSON{DurationNS: int64(st.Duration), Rate: st.Rate})
	}
	return j
}

func (j *headerJSON) header() Header {
	c := j.Config
	h := Header{Version: j.History, URL: j.URL, Method: j.Method, CountsBefore: j.CountsBefore, Settings: Settings{
		Mode: c.Mode, KeyHeader: c.KeyHeader, Keys: c.Keys, Dups: c.Dups, Concurrency: c.Concurrency,
		Timeout: time.Duration(c.TimeoutNS), Retry: c.Retry, MaxRetries: c.MaxRetries, Probe: c.Probe,
		Rate: c.Rate, Duration: time.Duration(c.DurationNS), MaxInFlight: c.MaxInFlight,
		AttemptTimeout: time.Duration(c.AttemptTimeoutNS), Retries: c.Retries,
		BaseDelay: time.Duration(c.BackoffMinNS), MaxDelay: time.Duration(c.BackoffMaxNS), CountURL: c.CountURL,
		MaxP99: time.Duration(c.MaxP99NS), MaxAmplification: c.MaxAmplification, MinGoodput: c.MinGoodput,
		MinExactlyOnceGoodput: c.MinExactlyOnceGoodput, MaxPeakAmplification: c.MaxPeakAmplification,
		MaxFailures: c.MaxFailures, Policy: c.Policy, MaxRecovery: time.Duration(c.MaxRecoveryNS), Settle: time.Duration(c.SettleNS),
	}, Faults: faultsOf(j.Faults), Events: eventsOf(j.Events)}
	for _, cs := range c.Counts {
		h.Settings.Counts = append(h.Settings.Counts, CountSpec(cs))
	}
	for _, st := range c.Stages {
		h.Settings.Stages = append(h.Settings.Stages, Stage{Duration: time.Duration(st.DurationNS), Rate: st.Rate})
	}
	return h
}
