package storm

import (
	"crypto/sha256"
	"net/http"
	"time"
)

// A History is what a storm did, attempt by attempt: the input of Check,
// and what Config.History (--history) writes as JSON Lines. It is plain
// data, as porcupine's histories are: every attempt with its call and
// return times, nothing computed. A History read back from a file
// (ReadHistory), several merged (MergeHistories), or built by hand in a
// test is judged by Check exactly as the storm that recorded it judged
// it.
type History struct {
	// Header is the history's first line: the target, the start time and
	// the storm's settings.
	Header Header
	// Operations are the storm's operations (load mode) or keys (burst
	// mode) in schedule order, Operations[i].Op == i, each with its
	// attempts. A load run lists every operation it scheduled before it
	// ended, sent or not; a burst lists the keys it sent and, when it was
	// interrupted, those it did not.
	Operations []Operation
	// End holds what the storm knew once it had finished; nil when the
	// history stops short (the storm was killed), which Check reads as an
	// interrupted run.
	End *End
	// Counts holds the side-effect counts read before and after the storm,
	// by field; nil without a count URL.
	Counts map[string]CountReading
	// Ledger, when not nil, lists the side effects the service recorded
	// (idemkey check --ledger): Check then decides at most once key by key
	// from it instead of from the counts' totals. A storm never sets it.
	Ledger []Effect
}

// HistoryVersion is the version of the history format this package writes
// and reads, the value of the header's "history" member.
const HistoryVersion = 1

// Header is a history's first line.
type Header struct {
	// Version is HistoryVersion.
	Version int
	// URL is the target, its password (if any) replaced by "***".
	URL string
	// Method is the HTTP method.
	Method string
	// Started is when the storm started sending, by the wall clock of the
	// machine that ran it: the origin of every Sent, Done, Scheduled and
	// Ended of the history, and what MergeHistories aligns several
	// histories by.
	Started time.Time
	// Settings are the storm's, after defaults.
	Settings Settings
	// CountsBefore holds the side-effect counts read before the storm, by
	// field, so that a history cut short still has them; the counts line
	// at the end has them too.
	CountsBefore map[string]int64
	// Faults are the fault hops' windows (Config.Faults), in the order
	// they open, without counts yet (End.Faults has them).
	Faults []Fault
	// Events are the commands scheduled (Config.At), in the order of
	// their times, not run yet (End.Events has what they did).
	Events []Event
}

// Settings are the parts of a Config that a History keeps: what Check
// needs to judge it and to report it as the storm did.
type Settings struct {
	// Mode is "burst" or "load".
	Mode string
	// KeyHeader is the header that carried the key.
	KeyHeader string
	// Keys is the number of keys (operations, in load mode).
	Keys int
	// Dups is the number of copies of each key (operation).
	Dups int
	// Concurrency is the burst mode's workers.
	Concurrency int
	// Timeout bounds a request (burst) or an operation (load); an
	// operation that never started counts as having taken it.
	Timeout time.Duration
	// Retry reports the burst mode's Config.Retry.
	Retry bool
	// MaxRetries is the burst mode's Config.MaxRetries.
	MaxRetries int
	// Probe reports whether the late probe was on.
	Probe bool
	// Rate, Duration, MaxInFlight, AttemptTimeout and Retries are load
	// mode's Config fields of the same names.
	Rate           float64
	Duration       time.Duration
	MaxInFlight    int
	AttemptTimeout time.Duration
	Retries        int
	// BaseDelay and MaxDelay are the load mode's backoff bounds.
	BaseDelay, MaxDelay time.Duration
	// Stages are load mode's Config.Stages; Rate is then the rate the
	// first starts from, and Duration their sum.
	Stages []Stage
	// CountURL is Config.CountURL, its password replaced by "***".
	CountURL string
	// Counts are the side-effect counts read, in order.
	Counts []CountSpec
	// MaxP99, MaxAmplification, MinGoodput, MinExactlyOnceGoodput and
	// MaxPeakAmplification are load mode's thresholds (Config).
	MaxP99                time.Duration
	MaxAmplification      float64
	MinGoodput            float64
	MinExactlyOnceGoodput float64
	MaxPeakAmplification  float64
	// MaxFailures is Config.MaxFailures.
	MaxFailures int
	// Policy is load mode's retry policy (Config.RetryPolicies, one arm's).
	Policy string
	// MaxRecovery is load mode's threshold on Report.Recovery.
	MaxRecovery time.Duration
	// Settle is how long the storm waited after its last attempt before
	// reading the counts after it (Config.Settle, after defaults; 0 for
	// none).
	Settle time.Duration
}

// CountSpec is one side-effect count (Config.Counts, --count-field
// NAME[=N]): the member Field of the count URL's JSON object, and the
// number of side effects Want that one operation makes on it.
type CountSpec struct {
	// Field names the number in the count URL's JSON object; dots reach
	// into nested objects ("stats.charges").
	Field string
	// Want is how many side effects one operation makes on Field: 1 for a
	// charge per checkout, 2 for two e-mails, 0 for an operation that must
	// make none. Negative values are invalid.
	Want int
}

// Operation is one operation of a load run, or one key of a burst, with
// its attempts.
type Operation struct {
	// Op is the operation's index in schedule order (the key's, in the
	// burst mode), from 0.
	Op int
	// Key is its idempotency key.
	Key string
	// Scheduled is when it was due to start, from History.Header.Started
	// (load mode; 0 in the burst mode).
	Scheduled time.Duration
	// Ended is when its last copy ended (load mode).
	Ended time.Duration
	// Late reports that its first attempt waited for a MaxInFlight slot.
	Late bool
	// Attempts are its attempts, the late probe's included, in the order
	// the storm recorded them: an attempt is recorded when the storm knows
	// whether it sent another one after it.
	Attempts []Attempt
}

// Class is the class of one attempt: how it was answered.
type Class string

// The classes of an attempt, checked in this order: a transport error or
// timeout (no complete HTTP response), a replay ("Idempotent-Replayed:
// true", any status), in progress (409), retry later (408, 425, 429, 503),
// mismatch (422), a server error (other 5xx), a client error (other 4xx),
// and an original (anything else). Mismatch, client error and original are
// executions; a server error is never one.
const (
	ClassOriginal       Class = "original"
	ClassReplay         Class = "replay"
	ClassInProgress     Class = "in_progress"
	ClassRetryLater     Class = "retry_later"
	ClassMismatch       Class = "mismatch"
	ClassClientError    Class = "client_error"
	ClassServerError    Class = "server_error"
	ClassTimeout        Class = "timeout"
	ClassTransportError Class = "transport_error"
)

// classes lists every Class, to validate what a history file says.
var classes = []Class{ClassOriginal, ClassReplay, ClassInProgress, ClassRetryLater, ClassMismatch,
	ClassClientError, ClassServerError, ClassTimeout, ClassTransportError}

// classOf classifies an answer: status and replayed as received, failed
// when no complete response arrived (timeout when the client's own
// timeout cut it).
func classOf(status int, replayed, failed, timeout bool) Class {
	switch {
	case failed && timeout:
		return ClassTimeout
	case failed:
		return ClassTransportError
	case replayed:
		return ClassReplay
	case status == http.StatusConflict:
		return ClassInProgress
	case notFinal(status):
		return ClassRetryLater
	case status == http.StatusUnprocessableEntity:
		return ClassMismatch
	case status >= 500:
		return ClassServerError
	case status >= 400:
		return ClassClientError
	default:
		return ClassOriginal
	}
}

// Answered reports whether the class is an HTTP response (not a timeout or
// a transport error).
func (c Class) Answered() bool { return c != ClassTimeout && c != ClassTransportError }

// Executes reports whether an answer of this class says that the server
// ran the request: original, mismatch and client error. A server error
// (5xx) never does: idemkey releases a key on a 5xx and the next attempt
// runs it again, so a 500 then a 201 is one execution, and a 5xx is
// neither an execution nor a final answer.
func (c Class) Executes() bool {
	return c == ClassOriginal || c == ClassMismatch || c == ClassClientError
}

// Lost reports whether an attempt of this class lost its answer on the
// way: the server may have run it, and may still be running it.
func (c Class) Lost() bool { return !c.Answered() }

// Attempt is one HTTP attempt: one line of a history file.
type Attempt struct {
	// Op is the index of its operation (key).
	Op int
	// Key is its idempotency key.
	Key string
	// Copy is which copy of the operation sent it, from 0 (of Dups).
	Copy int
	// Attempt is its number within its copy, from 1.
	Attempt int
	// Sent and Done are when it was sent and when its answer (or error)
	// was complete, monotonic, from History.Header.Started.
	Sent, Done time.Duration
	// Class is how it was answered.
	Class Class
	// Status is the HTTP status, 0 when none arrived.
	Status int
	// Replayed reports "Idempotent-Replayed: true" on the answer.
	Replayed bool
	// BodySHA256 is the SHA-256 of the answer's body (zero without an
	// answer).
	BodySHA256 [sha256.Size]byte
	// Retried reports that storm sent another attempt of the same copy
	// after this one: the answer did not end the copy.
	Retried bool
	// Probe reports that it belongs to the late probe.
	Probe bool
	// Size is the body's length in bytes.
	Size int64
	// Snippet is the body's first bytes (at most 48), to describe it,
	// without a UTF-8 sequence cut short at its end.
	Snippet string
	// Oversize reports a replay whose body is idemkey's response-too-large
	// problem with the status of the original: it stands for the original.
	Oversize bool
	// Error says why no complete answer arrived; empty otherwise.
	Error string
}

// final reports whether the attempt is a final answer: an execution or a
// replay that ended its copy (a 5xx never is).
func (a *Attempt) final() bool { return !a.Retried && (a.Class.Executes() || a.Class == ClassReplay) }

// End is what a storm knew once it had finished: the last line but the
// counts' of a history file.
type End struct {
	// Elapsed is how long the storm took, the probe aside.
	Elapsed time.Duration
	// ProbeElapsed is how long the late probe took.
	ProbeElapsed time.Duration
	// Interrupted reports that the storm was cancelled before it ended.
	Interrupted bool
	// Error says why the storm stopped early, if it did for a reason of
	// its own (an invalid header from Config.HeaderFor).
	Error string
	// Faults are the fault windows with what each did (Fault's counts).
	Faults []Fault
	// Events are the commands with what each did.
	Events []Event
}

// CountReading is one side-effect count read before and after the storm.
type CountReading struct {
	// Before is the count before the storm.
	Before int64
	// After is the count after the storm and the probe, if Read.
	After int64
	// Read reports whether After was read.
	Read bool
	// At is when After was read (or its read failed), from
	// History.Header.Started, monotonic: Settings.Settle after the last
	// attempt at the earliest. 0 when it was not read after.
	At time.Duration
	// Error says why After could not be read.
	Error string
}

// Effect is one side effect a service made, one line of a ledger
// (JSON Lines, written by the service outside its store): {"key": …,
// "effect": "charge"}. Only Key is required.
type Effect struct {
	// Key is the idempotency key of the request that made it.
	Key string
	// Effect names it ("charge", "email"); a key's executions are counted
	// per Effect.
	Effect string
	// Execution identifies the run of the handler that made it, when the
	// service records one: a key's executions are then its distinct
	// Executions instead.
	Execution string
	// Attempt is the attempt number the service's store gave the run, if
	// any.
	Attempt int
	// Token is the fencing token the run held, if any.
	Token string
	// Refused reports that the store refused the run's completion (its
	// fencing token was stale): the service records that the effect did
	// not take, and it is not counted.
	Refused bool
	// NotStored reports that the store could not store the run's outcome
	// (Redis unreachable; "not_stored"): the service was told that a retry
	// may run the key again. CheckSchedule still counts a second
	// execution, and reports it as announced.
	NotStored bool
	// Start and End are when the run began and when it made the effect,
	// by the service's wall clock (RFC 3339 "start" and "end"); zero when
	// the service records none. CheckSchedule's leases property compares
	// them.
	Start, End time.Time
}
