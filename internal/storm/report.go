package storm

import "time"

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
