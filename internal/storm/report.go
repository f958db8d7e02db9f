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

// Verdict values as they appear in Report.Verdict and in the JSON report.
const (
	// VerdictPass means every key behaved idempotently.
	VerdictPass = "pass"
	// VerdictFail means a key failed, or the storm was inconclusive.
	VerdictFail = "fail"
)

// Report is the self-contained result of a storm: the configuration it ran
// with, the figures it measured and the verdict. The package documentation
// defines how responses are classified.
type Report struct {
	// URL is the target URL.
	URL string
	// Method is the HTTP method used.
	Method string
	// Keys is the number of idempotency keys.
	Keys int
	// Dups is the number of duplicates sent per key.
	Dups int
	// Concurrency is the number of workers.
	Concurrency int
	// Timeout is the per-attempt timeout.
	Timeout time.Duration
	// Retry409 reports whether 409 answers were retried.
	Retry409 bool

	// Requests is the number of HTTP attempts made, retries and transport
	// errors included.
	Requests int
	// Responses is the number of HTTP responses received.
	Responses int
	// Retries is the number of 409 retries sent.
	Retries int
	// Elapsed is the wall-clock duration of the storm.
	Elapsed time.Duration
	// Latency summarises the latency of all HTTP responses.
	Latency Latency
	// StatusCounts counts HTTP responses by status code.
	StatusCounts map[int]int

	// Originals counts responses produced by executing the request.
	Originals int
	// Replays counts responses carrying "Idempotent-Replayed: true".
	Replays int
	// InProgress counts non-replayed 409 responses.
	InProgress int
	// Errors is TransportErrors plus ServerErrors.
	Errors int
	// TransportErrors counts attempts that got no complete HTTP response.
	TransportErrors int
	// ServerErrors counts non-replayed 5xx responses.
	ServerErrors int

	// KeysPassed is the number of keys that passed.
	KeysPassed int
	// KeysFailed is the number of keys that failed.
	KeysFailed int
	// KeysUnresolved is the number of keys that got no final response
	// (only 409s and errors); they count as passed.
	KeysUnresolved int
	// Failures lists failing keys in key order, at most Config.MaxFailures
	// of them.
	Failures []Failure

	// Interrupted reports that the storm was cancelled before completing.
	Interrupted bool
	// Error explains why the storm is inconclusive, e.g. when no HTTP
	// response was received at all; empty otherwise.
	Error string
}

// Latency holds nearest-rank latency percentiles.
type Latency struct {
	// P50 is the median latency.
	P50 time.Duration
	// P90 is the 90th percentile latency.
	P90 time.Duration
	// P99 is the 99th percentile latency.
	P99 time.Duration
	// Max is the highest latency.
	Max time.Duration
}

// Failure describes one key that failed the verdict.
type Failure struct {
	// Key is the idempotency key.
	Key string `json:"key"`
	// Reason says why the key failed, e.g. "executed 3 times (...)" or
	// "divergent: 2 distinct final responses: ...".
	Reason string `json:"reason"`
	// Originals counts the key's original responses.
	Originals int `json:"originals"`
	// Replays counts the key's replayed responses.
	Replays int `json:"replays"`
	// InProgress counts the key's non-replayed 409 responses.
	InProgress int `json:"in_progress"`
	// Errors counts the key's transport errors and non-replayed 5xx.
	Errors int `json:"errors"`
	// Statuses counts the key's HTTP responses by status code.
	Statuses map[int]int `json:"statuses"`
}

// Pass reports whether the storm passed: no key failed, at least one HTTP
// response was received and the storm was not interrupted.
func (r *Report) Pass() bool {
	return r.KeysFailed == 0 && r.Error == "" && !r.Interrupted && r.Responses > 0
}

// Verdict returns VerdictPass or VerdictFail.
func (r *Report) Verdict() string {
	if r.Pass() {
		return VerdictPass
	}
	return VerdictFail
}

// ExitCode returns the process exit code for the report: 0 when it passed,
// 1 when a key failed the verdict, 2 when the storm was inconclusive (no
// HTTP response at all, or interrupted).
func (r *Report) ExitCode() int {
	switch {
	case r.KeysFailed > 0:
		return 1
	case !r.Pass():
		return 2
	default:
		return 0
	}
}

// Throughput returns the attempts per second over the whole storm.
func (r *Report) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

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
