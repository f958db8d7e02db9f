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
	retry := "off"
	if r.Retry409 {
		retry = "on"
	}
	fmt.Fprintf(&b, "idemkey storm: %s %s\n", r.Method, r.URL)
	fmt.Fprintf(&b, "  %d keys x %d dups, concurrency %d, timeout %s, retry-409 %s\n\n",
		r.Keys, r.Dups, r.Concurrency, r.Timeout, retry)
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
	row("replays", "%d", r.Replays)
	row("in progress", "%d (409 without %s)", r.InProgress, headerReplayed)
	row("errors", "%d (transport %d, 5xx %d)", r.Errors, r.TransportErrors, r.ServerErrors)
	row("keys", "%d passed, %d failed, %d without a final response", r.KeysPassed, r.KeysFailed, r.KeysUnresolved)
	if len(r.Failures) > 0 {
		fmt.Fprintf(&b, "\nfailed keys (showing %d of %d):\n", len(r.Failures), r.KeysFailed)
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "  %s  %s\n", f.Key, f.Reason)
		}
	}
	b.WriteString("\nverdict: ")
	switch {
	case r.Pass():
		b.WriteString("PASS\n")
	case r.KeysFailed > 0:
		fmt.Fprintf(&b, "FAIL (%d of %d keys failed)\n", r.KeysFailed, r.Keys)
	case r.Error != "":
		fmt.Fprintf(&b, "FAIL (inconclusive: %s)\n", r.Error)
	case r.Interrupted:
		b.WriteString("FAIL (inconclusive: interrupted)\n")
	default:
		b.WriteString("FAIL (inconclusive: no HTTP response)\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// jsonReport is the stable JSON form of a Report.
type jsonReport struct {
	Verdict         string      `json:"verdict"`
	URL             string      `json:"url"`
	Method          string      `json:"method"`
	Keys            int         `json:"keys"`
	Dups            int         `json:"dups"`
	Concurrency     int         `json:"concurrency"`
	TimeoutMS       float64     `json:"timeout_ms"`
	Retry409        bool        `json:"retry_409"`
	Requests        int         `json:"requests"`
	Responses       int         `json:"responses"`
	Retries         int         `json:"retries"`
	ElapsedMS       float64     `json:"elapsed_ms"`
	ThroughputRPS   float64     `json:"throughput_rps"`
	LatencyMS       jsonLatency `json:"latency_ms"`
	StatusCounts    map[int]int `json:"status_counts"`
	Originals       int         `json:"originals"`
	Replays         int         `json:"replays"`
	InProgress      int         `json:"in_progress"`
	Errors          int         `json:"errors"`
	TransportErrors int         `json:"transport_errors"`
	ServerErrors    int         `json:"server_errors"`
	KeysPassed      int         `json:"keys_passed"`
	KeysFailed      int         `json:"keys_failed"`
	KeysUnresolved  int         `json:"keys_unresolved"`
	Failures        []Failure   `json:"failures"`
	Interrupted     bool        `json:"interrupted"`
	Error           string      `json:"error,omitempty"`
}

type jsonLatency struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// WriteJSON writes the report to w as one JSON object on one line. Field
// names are stable snake_case; durations are in milliseconds and
// status_counts is keyed by the status code as a string.
func (r *Report) WriteJSON(w io.Writer) error {
	failures := r.Failures
	if failures == nil {
		failures = []Failure{}
	}
	counts := r.StatusCounts
	if counts == nil {
		counts = map[int]int{}
	}
	j := jsonReport{
		Verdict:       r.Verdict(),
		URL:           r.URL,
		Method:        r.Method,
		Keys:          r.Keys,
		Dups:          r.Dups,
		Concurrency:   r.Concurrency,
		TimeoutMS:     ms(r.Timeout),
		Retry409:      r.Retry409,
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
		InProgress:      r.InProgress,
		Errors:          r.Errors,
		TransportErrors: r.TransportErrors,
		ServerErrors:    r.ServerErrors,
		KeysPassed:      r.KeysPassed,
		KeysFailed:      r.KeysFailed,
		KeysUnresolved:  r.KeysUnresolved,
		Failures:        failures,
		Interrupted:     r.Interrupted,
		Error:           r.Error,
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
