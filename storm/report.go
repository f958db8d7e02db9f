package storm

import (
	"fmt"
	"time"
)

// Verdict values as they appear in Report.Verdict and in the JSON report.
const (
	// VerdictPass means every key passed (and the side-effect count, when
	// read, grew by exactly the number of keys).
	VerdictPass = "pass"
	// VerdictFail means at least one key failed, or the side-effect count
	// grew by fewer than the keys that passed, or by more than those plus
	// one per inconclusive key.
	VerdictFail = "fail"
	// VerdictInconclusive means no key failed but not every key passed:
	// some got no final answer (or the probe got none), the storm was
	// interrupted, or the count could not be read after it.
	VerdictInconclusive = "inconclusive"
)

// Report is the self-contained result of a storm: the configuration it ran
// with, the figures it measured and the verdict. The package documentation
// defines how answers and keys are classified. The figures describe the
// storm itself; the late probe has its own (Probe).
type Report struct {
	// URL is the target URL.
	URL string
	// Method is the HTTP method used.
	Method string
	// KeyHeader is the header that carried the idempotency key.
	KeyHeader string
	// Keys is the number of idempotency keys.
	Keys int
	// Dups is the number of duplicates sent per key.
	Dups int
	// Concurrency is the number of workers.
	Concurrency int
	// Timeout bounds each request, its retries included.
	Timeout time.Duration
	// Retry reports whether answers that are not final were retried.
	Retry bool

	// Requests is the number of HTTP attempts made, retries and transport
	// errors included.
	Requests int
	// Responses is the number of HTTP responses received.
	Responses int
	// Retries is the number of retries the storm sent (Config.Retry).
	Retries int
	// Elapsed is the wall-clock duration of the storm, without the probe.
	Elapsed time.Duration
	// Latency summarises the latency of all HTTP responses.
	Latency Latency
	// StatusCounts counts HTTP responses by status code.
	StatusCounts map[int]int

	// Originals counts executions: responses without
	// "Idempotent-Replayed: true" other than 408, 409, 425, 429 and 503,
	// 5xx included.
	Originals int
	// Replays counts responses carrying "Idempotent-Replayed: true".
	Replays int
	// OversizeReplays counts the replays whose body is the
	// response-too-large problem with the status of the original; they are
	// among Replays.
	OversizeReplays int
	// InProgress counts non-replayed 409 responses.
	InProgress int
	// RetryLater counts non-replayed 408, 425, 429 and 503 responses.
	RetryLater int
	// Errors is TransportErrors plus ServerErrors.
	Errors int
	// TransportErrors counts attempts that got no complete HTTP response.
	TransportErrors int
	// ServerErrors counts non-replayed 5xx responses other than 503; they
	// are among Originals.
	ServerErrors int
	// Timeouts counts the attempts the client's own timeout cut
	// (Config.Timeout, or Config.AttemptTimeout in load mode); they are
	// among TransportErrors.
	Timeouts int
	// ReplayOnly counts the keys that passed on replays alone: no attempt
	// of theirs was answered as an original, because the original's answer
	// was lost on the way (a timeout or a transport error). Only
	// Config.CountURL proves that such a key ran once.
	ReplayOnly int

	// Probe is the outcome of the late probe.
	Probe Probe
	// Count is the side-effect count check; nil without Config.CountURL.
	Count *Count

	// KeysPassed is the number of keys that passed.
	KeysPassed int
	// KeysFailed is the number of keys that failed.
	KeysFailed int
	// KeysInconclusive is the number of keys that neither passed nor
	// failed: no final answer, or a probe without one.
	KeysInconclusive int
	// Failures lists failed keys in key order, at most Config.MaxFailures
	// of them.
	Failures []Failure
	// Inconclusive lists inconclusive keys in key order, at most
	// Config.MaxFailures of them.
	Inconclusive []Failure

	// Load holds load mode's figures: operations, amplification, goodput,
	// latencies from the scheduled start, the timeline. Nil in the burst
	// mode.
	Load *Load
	// Thresholds lists load mode's thresholds and how the run measured
	// against them; a broken one makes ExitCode 1 whatever the verdict.
	Thresholds []Threshold

	// Interrupted reports that the storm was cancelled before completing.
	Interrupted bool
	// Error says why not a single HTTP response was received; empty
	// otherwise.
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

// Probe is the outcome of the late probe: one more duplicate per key that
// got a final answer, sent after the storm on a fresh connection.
type Probe struct {
	// Enabled reports whether the probe ran (Config.NoProbe unset).
	Enabled bool
	// Sent is the number of keys probed.
	Sent int
	// Retries is the number of retries the probe sent (Config.Retry).
	Retries int
	// Identical counts probes answered with a replay identical to the
	// key's final answer.
	Identical int
	// Executed counts probes answered without "Idempotent-Replayed: true":
	// the server ran the request again.
	Executed int
	// Divergent counts probes replayed with another status or body.
	Divergent int
	// NotFinal counts probes that got no final answer (408, 409, 425,
	// 429, 503 or a transport error, after retries with Config.Retry).
	NotFinal int
	// Elapsed is the wall-clock duration of the probe.
	Elapsed time.Duration
}

// Count is the side-effect count read from Config.CountURL before and
// after the storm.
type Count struct {
	// URL is Config.CountURL.
	URL string
	// Field is Config.CountField.
	Field string
	// Before is the count read before the storm.
	Before int64
	// After is the count read after the storm and the probe, if Read.
	After int64
	// Read reports whether After was read; it is false when the storm was
	// interrupted or the read failed (Error).
	Read bool
	// Error says why After could not be read.
	Error string
}

// Delta returns After minus Before.
func (c *Count) Delta() int64 { return c.After - c.Before }

// Failure describes one key that did not pass: a failed or an inconclusive
// one.
type Failure struct {
	// Key is the idempotency key.
	Key string `json:"key"`
	// Reason says why the key did not pass, e.g. "executed 3 times (...)",
	// "divergent: 2 distinct final responses: ...", "no final answer".
	Reason string `json:"reason"`
	// Originals counts the key's executions in the storm.
	Originals int `json:"originals"`
	// Replays counts the key's replayed responses.
	Replays int `json:"replays"`
	// InProgress counts the key's non-replayed 409 responses.
	InProgress int `json:"in_progress"`
	// RetryLater counts the key's non-replayed 408, 425, 429 and 503.
	RetryLater int `json:"retry_later"`
	// TransportErrors counts the key's attempts without an HTTP response.
	TransportErrors int `json:"transport_errors"`
	// Statuses counts the key's HTTP responses by status code.
	Statuses map[int]int `json:"statuses"`
	// Probe describes what the late probe got, e.g. "201 replayed,
	// identical" or "201 not replayed"; empty when the key was not probed.
	Probe string `json:"probe,omitempty"`
}

// countMismatch reports whether the side-effect count was read and grew by
// another number than the keys that passed, give or take one for each
// inconclusive key: a key whose answers were lost may have run once, but
// not twice.
func (r *Report) countMismatch() bool {
	if r.Count == nil || !r.Count.Read {
		return false
	}
	d := r.Count.Delta()
	return d < int64(r.KeysPassed) || d > int64(r.KeysPassed+r.KeysInconclusive)
}

// countWant describes the growth of the count the keys allow: "5 keys
// passed", or "5 to 7: 5 keys passed, 2 inconclusive".
func (r *Report) countWant() string {
	if r.KeysInconclusive == 0 {
		return fmt.Sprintf("%d keys passed", r.KeysPassed)
	}
	return fmt.Sprintf("%d to %d: %d keys passed, %d inconclusive", r.KeysPassed, r.KeysPassed+r.KeysInconclusive, r.KeysPassed, r.KeysInconclusive)
}

// Verdict returns VerdictPass, VerdictFail or VerdictInconclusive, as the
// package documentation defines them.
func (r *Report) Verdict() string {
	switch {
	case r.KeysFailed > 0 || r.countMismatch():
		return VerdictFail
	case r.KeysInconclusive > 0 || r.KeysPassed < r.Keys || r.Interrupted || r.Responses == 0 ||
		(r.Count != nil && !r.Count.Read):
		return VerdictInconclusive
	default:
		return VerdictPass
	}
}

// Pass reports whether the verdict is VerdictPass.
func (r *Report) Pass() bool { return r.Verdict() == VerdictPass }

// ExitCode returns the process exit code for the report: 0 for pass with
// no broken threshold, 2 when not a single HTTP response was received, 1
// otherwise (fail, inconclusive, or a broken threshold).
func (r *Report) ExitCode() int {
	switch {
	case r.Pass() && len(r.BrokenThresholds()) == 0:
		return 0
	case r.Responses == 0:
		return 2
	default:
		return 1
	}
}

// Throughput returns the storm's attempts per second.
func (r *Report) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}
