package storm

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// WriteText writes a human-readable report to w.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	row := func(label, format string, args ...any) {
		fmt.Fprintf(&b, "%-14s %s\n", label, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(&b, "idemkey storm: %s %s\n", r.Method, r.URL)
	fmt.Fprintf(&b, "  %d keys x %d dups, concurrency %d, timeout %s, retry %s, probe %s",
		r.Keys, r.Dups, r.Concurrency, r.Timeout, onOff(r.Retry), onOff(r.Probe.Enabled))
	if r.KeyHeader != "" && r.KeyHeader != headerIdempotencyKey {
		fmt.Fprintf(&b, ", key header %s", r.KeyHeader)
	}
	b.WriteString("\n\n")
	row("requests", "%d (%d responses, %d retries)", r.Requests, r.Responses, r.Retries)
	row("elapsed", "%s", fmtDuration(r.Elapsed))
	row("throughput", "%.1f req/s", r.Throughput())
	row("latency", "p50 %s  p90 %s  p99 %s  max %s",
		fmtDuration(r.Latency.P50), fmtDuration(r.Latency.P90), fmtDuration(r.Latency.P99), fmtDuration(r.Latency.Max))
	var statuses []string
	for _, code := range slices.Sorted(maps.Keys(r.StatusCounts)) {
		statuses = append(statuses, fmt.Sprintf("%d: %d", code, r.StatusCounts[code]))
	}
	if len(statuses) == 0 {
		statuses = []string{"none"}
	}
	row("status codes", "%s", strings.Join(statuses, "  "))
	row("originals", "%d", r.Originals)
	if r.OversizeReplays > 0 {
		row("replays", "%d (%d response-too-large)", r.Replays, r.OversizeReplays)
	} else {
		row("replays", "%d", r.Replays)
	}
	row("in progress", "%d (409 without %s)", r.InProgress, headerReplayed)
	row("retry later", "%d (408, 425, 429, 503 without %s)", r.RetryLater, headerReplayed)
	row("errors", "%d (transport %d, 5xx %d)", r.Errors, r.TransportErrors, r.ServerErrors)
	if r.Probe.Enabled {
		row("late probe", "%d keys probed: %d identical replays, %d ran again, %d replayed differently, %d without a final answer",
			r.Probe.Sent, r.Probe.Identical, r.Probe.Executed, r.Probe.Divergent, r.Probe.NotFinal)
	}
	if c := r.Count; c != nil {
		switch {
		case !c.Read && c.Error != "":
			row("count", "%s: %d before, unreadable after: %s", c.Field, c.Before, c.Error)
		case !c.Read:
			row("count", "%s: %d before, not read after", c.Field, c.Before)
		default:
			cmp := "="
			if c.Delta() != int64(r.KeysPassed) {
				cmp = "!="
			}
			row("count", "%s: %d before, %d after: delta %d %s %d keys passed", c.Field, c.Before, c.After, c.Delta(), cmp, r.KeysPassed)
		}
	}
	row("keys", "%d passed, %d failed, %d inconclusive", r.KeysPassed, r.KeysFailed, r.KeysInconclusive)
	writeKeys(&b, "failed", r.Failures, r.KeysFailed)
	writeKeys(&b, "inconclusive", r.Inconclusive, r.KeysInconclusive)

	b.WriteString("\nverdict: ")
	switch r.Verdict() {
	case VerdictPass:
		b.WriteString("PASS\n")
	case VerdictFail:
		var why []string
		if r.KeysFailed > 0 {
			why = append(why, fmt.Sprintf("%d of %d keys failed", r.KeysFailed, r.Keys))
		}
		if r.countMismatch() {
			why = append(why, fmt.Sprintf("%s grew by %d for %d keys passed", r.Count.Field, r.Count.Delta(), r.KeysPassed))
		}
		fmt.Fprintf(&b, "FAIL (%s)\n", strings.Join(why, "; "))
	default:
		var why []string
		switch {
		case r.Error != "":
			why = append(why, r.Error)
		case r.Interrupted:
			why = append(why, "interrupted")
		}
		if r.KeysInconclusive > 0 && r.Error == "" {
			why = append(why, fmt.Sprintf("%d of %d keys inconclusive", r.KeysInconclusive, r.Keys))
		}
		if r.Count != nil && !r.Count.Read && !r.Interrupted {
			why = append(why, "count unreadable after the storm")
		}
		fmt.Fprintf(&b, "INCONCLUSIVE (%s)\n", strings.Join(why, "; "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeKeys lists the keys of one class with what each got.
func writeKeys(b *strings.Builder, class string, keys []Failure, total int) {
	if len(keys) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s keys (showing %d of %d):\n", class, len(keys), total)
	for _, f := range keys {
		fmt.Fprintf(b, "  %s  %s\n", f.Key, f.Reason)
		got := describeStatuses(f.Statuses, f.TransportErrors)
		if f.Probe != "" {
			got += "; late probe: " + f.Probe
		}
		fmt.Fprintf(b, "      got %s\n", got)
	}
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// jsonReport is the stable JSON form of a Report.
type jsonReport struct {
	Verdict          string      `json:"verdict"`
	URL              string      `json:"url"`
	Method           string      `json:"method"`
	KeyHeader        string      `json:"key_header"`
	Keys             int         `json:"keys"`
	Dups             int         `json:"dups"`
	Concurrency      int         `json:"concurrency"`
	TimeoutMS        float64     `json:"timeout_ms"`
	Retry            bool        `json:"retry"`
	Requests         int         `json:"requests"`
	Responses        int         `json:"responses"`
	Retries          int         `json:"retries"`
	ElapsedMS        float64     `json:"elapsed_ms"`
	ThroughputRPS    float64     `json:"throughput_rps"`
	LatencyMS        jsonLatency `json:"latency_ms"`
	StatusCounts     map[int]int `json:"status_counts"`
	Originals        int         `json:"originals"`
	Replays          int         `json:"replays"`
	OversizeReplays  int         `json:"oversize_replays"`
	InProgress       int         `json:"in_progress"`
	RetryLater       int         `json:"retry_later"`
	Errors           int         `json:"errors"`
	TransportErrors  int         `json:"transport_errors"`
	ServerErrors     int         `json:"server_errors"`
	Probe            jsonProbe   `json:"probe"`
	Count            *jsonCount  `json:"count,omitempty"`
	KeysPassed       int         `json:"keys_passed"`
	KeysFailed       int         `json:"keys_failed"`
	KeysInconclusive int         `json:"keys_inconclusive"`
	Failures         []Failure   `json:"failures"`
	Inconclusive     []Failure   `json:"inconclusive"`
	Interrupted      bool        `json:"interrupted"`
	Error            string      `json:"error,omitempty"`
}

type jsonLatency struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

type jsonProbe struct {
	Enabled   bool    `json:"enabled"`
	Sent      int     `json:"sent"`
	Identical int     `json:"identical"`
	Executed  int     `json:"executed"`
	Divergent int     `json:"divergent"`
	NotFinal  int     `json:"not_final"`
	Retries   int     `json:"retries"`
	ElapsedMS float64 `json:"elapsed_ms"`
}

type jsonCount struct {
	URL    string `json:"url"`
	Field  string `json:"field"`
	Before int64  `json:"before"`
	After  *int64 `json:"after"`
	Delta  *int64 `json:"delta"`
	Want   int    `json:"want"`
	Error  string `json:"error,omitempty"`
}

// WriteJSON writes the report to w as one JSON object on one line. Field
// names are stable snake_case; durations are in milliseconds and
// status_counts is keyed by the status code as a string. count is present
// only with a count URL; its after and delta are null when the count was
// not read after the storm.
func (r *Report) WriteJSON(w io.Writer) error {
	orEmpty := func(f []Failure) []Failure {
		if f == nil {
			return []Failure{}
		}
		return f
	}
	counts := r.StatusCounts
	if counts == nil {
		counts = map[int]int{}
	}
	j := jsonReport{
		Verdict:       r.Verdict(),
		URL:           r.URL,
		Method:        r.Method,
		KeyHeader:     r.KeyHeader,
		Keys:          r.Keys,
		Dups:          r.Dups,
		Concurrency:   r.Concurrency,
		TimeoutMS:     ms(r.Timeout),
		Retry:         r.Retry,
		Requests:      r.Requests,
		Responses:     r.Responses,
		Retries:       r.Retries,
		ElapsedMS:     ms(r.Elapsed),
		ThroughputRPS: math.Round(r.Throughput()*10) / 10,
		LatencyMS: jsonLatency{
			P50: ms(r.Latency.P50), P90: ms(r.Latency.P90), P99: ms(r.Latency.P99), Max: ms(r.Latency.Max),
		},
		StatusCounts:    counts,
		Originals:       r.Originals,
		Replays:         r.Replays,
		OversizeReplays: r.OversizeReplays,
		InProgress:      r.InProgress,
		RetryLater:      r.RetryLater,
		Errors:          r.Errors,
		TransportErrors: r.TransportErrors,
		ServerErrors:    r.ServerErrors,
		Probe: jsonProbe{
			Enabled: r.Probe.Enabled, Sent: r.Probe.Sent, Identical: r.Probe.Identical, Executed: r.Probe.Executed,
			Divergent: r.Probe.Divergent, NotFinal: r.Probe.NotFinal, Retries: r.Probe.Retries, ElapsedMS: ms(r.Probe.Elapsed),
		},
		KeysPassed:       r.KeysPassed,
		KeysFailed:       r.KeysFailed,
		KeysInconclusive: r.KeysInconclusive,
		Failures:         orEmpty(r.Failures),
		Inconclusive:     orEmpty(r.Inconclusive),
		Interrupted:      r.Interrupted,
		Error:            r.Error,
	}
	if c := r.Count; c != nil {
		j.Count = &jsonCount{URL: c.URL, Field: c.Field, Before: c.Before, Want: r.KeysPassed, Error: c.Error}
		if c.Read {
			after, delta := c.After, c.Delta()
			j.Count.After, j.Count.Delta = &after, &delta
		}
	}
	return json.NewEncoder(w).Encode(j)
}

// ms converts d to milliseconds rounded to the microsecond.
func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}

// fmtDuration renders d compactly with a precision suited to its size.
func fmtDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64) + "µs"
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
	default:
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
	}
}
