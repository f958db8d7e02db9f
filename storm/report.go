package storm

import (
	"time"
)

// Verdict values as they appear in Report.Verdict and in the JSON report.
const (
	// VerdictPass means every key passed (and every side-effect count,
	// when read, grew as the operations want).
	VerdictPass = "pass"
	// VerdictFail means at least one key failed, or a side-effect count
	// grew by another number than the keys allow (Count.OK).
	VerdictFail = "fail"
	// VerdictInconclusive means no key failed but not every key passed:
	// some got no final answer (or the probe got none), or could not be
	// proven to have run at most once, the storm was interrupted, a count
	// could not be read after it, or the ledger disagrees with the history.
	VerdictInconclusive = "inconclusive"
)

// Report is the self-contained result of a storm: the configuration it ran
// with, the figures it measured and the verdict. The package documentation
// defines how answers and keys are classified. The figures describe the
// storm itself; the late probe has its own (Probe).
type Report struct {
	// URL is the target URL, its password (if any) replaced by "***".
	URL string
	// Started is when the storm started sending (History.Header.Started).
	Started time.Time
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

	// Originals counts the responses without "Idempotent-Replayed: true"
	// other than 408, 409, 425, 429 and 503, 5xx included: executions,
	// but for the 5xx (ServerErrors), which never are.
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
	// are among Originals, and are neither executions nor final answers.
	ServerErrors int
	// RetriedServerErrors counts the ServerErrors that storm retried: by
	// RuleRetriesNotFinal they are neither executions nor final answers.
	RetriedServerErrors int
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
	// Count is the first side-effect count (Counts[0]); nil without
	// Config.CountURL.
	Count *Count
	// Counts are the side-effect counts, in the order given.
	Counts []Count
	// Ledger summarises the ledger Check was given; nil without one.
	Ledger *LedgerSummary

	// KeysPassed is the number of keys that passed.
	KeysPassed int
	// KeysFailed is the number of keys that failed.
	KeysFailed int
	// KeysInconclusive is the number of keys that neither passed nor
	// failed: no final answer, a probe without one, or unproven.
	KeysInconclusive int
	// KeysUnproven counts the inconclusive keys that RuleAtMostOnce left
	// unproven: the answers cannot tell whether they ran once, and no
	// count or ledger decided it.
	KeysUnproven int
	// Rules holds what each rule decided, in the order of the package
	// documentation.
	Rules []RuleResult
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

	// Policy is load mode's retry policy (Config.RetryPolicies), "" in
	// the burst mode and in a report of several arms.
	Policy string
	// Faults are the fault hops' windows, with what each did; Events the
	// commands run at a time of the run (Config.Faults, Config.At).
	Faults []Fault
	Events []Event
	// Recovery is how the run came back after its faults and events; nil
	// without any, in the burst mode, or without a whole second before the
	// first one for the baseline.
	Recovery *Recovery
	// Arms holds each arm's report when the storm ran several retry
	// policies (Config.RetryPolicies), in their order; this report then
	// has the target, the schedule and the verdict (the worst of the
	// arms'), and its other figures are left zero.
	Arms []*Report

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

// Count is one side-effect count read from Config.CountURL before and
// after the storm, and what the keys allow it to have grown by.
type Count struct {
	// URL is Config.CountURL, its password (if any) replaced by "***".
	URL string
	// Field is the count's member in the JSON object.
	Field string
	// Want is the side effects each operation makes on it.
	Want int
	// Operations is the number of operations (keys) of the storm.
	Operations int
	// Before is the count read before the storm.
	Before int64
	// After is the count read after the storm and the probe, if Read.
	After int64
	// Read reports whether After was read; it is false when the storm was
	// interrupted or the read failed (Error).
	Read bool
	// Error says why After could not be read.
	Error string
	// Min and Max bound the growth the keys allow: Want for each key whose
	// final answer was a 2xx or 3xx (passed, or unproven: once at least),
	// and up to Want more for each other key sent (no final answer, or a
	// 4xx: it may have run, once, or not).
	Min, Max int64

	ran, maybe, failed int // the keys that ran, those that may have, and the failed ones (not counted)
}

// Delta returns After minus Before.
func (c *Count) Delta() int64 { return c.After - c.Before }

// OK reports whether the count was not read, or grew within Min and Max.
func (c *Count) OK() bool { return !c.Read || (c.Delta() >= c.Min && c.Delta() <= c.Max) }

// LedgerSummary is what Check made of a ledger.
type LedgerSummary struct {
	// Effects is the number of side effects it lists.
	Effects int
	// Keys is the number of keys it names.
	Keys int
	// OtherKeys counts the keys it names that are not the history's.
	OtherKeys int
	// Malformed counts the effects it lists without a key, or with a
	// negative attempt; they are not counted as executions.
	Malformed int
	// Disagreement, when not empty, says why the ledger disagrees with the
	// history (OtherKeys, Malformed): such a ledger cannot vouch for the
	// history's keys, and the verdict is inconclusive.
	Disagreement string
}

// RuleResult is what one rule decided, over every key.
type RuleResult struct {
	// Name is the rule's: RuleAtMostOnce, RuleRetriesNotFinal, ...
	Name string
	// Failed counts the keys it failed.
	Failed int
	// Inconclusive counts the keys it left inconclusive.
	Inconclusive int
	// Passed counts the keys it let pass: for RuleAtMostOnce, unproven keys
	// that a count or a ledger proved to have run once; for
	// RuleRetriesNotFinal, keys with answers it set aside.
	Passed int
	// Keys lists some of the keys it decided (up to Config.MaxFailures).
	Keys []string
}

// Failure describes one key that did not pass: a failed or an inconclusive
// one.
type Failure struct {
	// Key is the idempotency key.
	Key string `json:"key"`
	// Rule names the rule that decided the key (RuleAtMostOnce, ...).
	Rule string `json:"rule"`
	// Reason says why the key did not pass, e.g. "executed 3 times (...)",
	// "divergent: 2 distinct final responses: ...", "no final answer".
	Reason string `json:"reason"`
	// Originals counts the key's executions in the storm (a 5xx is
	// none).
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

// countMismatch reports whether a count was read and grew by another
// number than the keys allow.
func (r *Report) countMismatch() bool {
	for i := range r.Counts {
		if !r.Counts[i].OK() {
			return true
		}
	}
	return false
}

// countUnread reports whether a count could not be read after the storm.
func (r *Report) countUnread() bool {
	for i := range r.Counts {
		if !r.Counts[i].Read {
			return true
		}
	}
	return false
}

// Verdict returns VerdictPass, VerdictFail or VerdictInconclusive, as the
// package documentation defines them.
func (r *Report) Verdict() string {
	if len(r.Arms) > 0 {
		return r.armsVerdict()
	}
	switch {
	case r.KeysFailed > 0 || r.countMismatch():
		return VerdictFail
	case r.KeysInconclusive > 0 || r.KeysPassed < r.Keys || r.Interrupted || r.Responses == 0 || r.countUnread() ||
		(r.Ledger != nil && r.Ledger.Disagreement != ""):
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
