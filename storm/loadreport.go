package storm

import (
	"fmt"
	"math"
	"math/bits"
	"strings"
	"sync/atomic"
	"time"
)

// Load holds load mode's figures (Report.Load); the package documentation
// defines them.
type Load struct {
	// Rate is the operations scheduled per second (Config.Rate); with
	// Stages, the rate the first starts from.
	Rate float64
	// Duration is the schedule's length (Config.Duration).
	Duration time.Duration
	// MaxInFlight bounds the attempts in flight (Config.MaxInFlight).
	MaxInFlight int
	// AttemptTimeout bounds each attempt; 0 for none but Report.Timeout.
	AttemptTimeout time.Duration
	// MaxRetries bounds the retries of each copy (Config.Retries).
	MaxRetries int
	// BaseDelay and MaxDelay are the backoff's bounds (Config.Policy).
	BaseDelay, MaxDelay time.Duration
	// Stages are the arrival rate's stages (Config.Stages), from Rate.
	Stages []Stage

	// Operations counts the operations by what became of them.
	Operations Operations
	// Attempts is the number of attempts sent, retries included.
	Attempts int
	// Amplification is Attempts per operation started.
	Amplification float64
	// Goodput is the operations completed per second of the schedule.
	Goodput float64
	// ExactlyOnceGoodput is the operations completed per second of the
	// schedule whose key passed: what was done, once, for sure.
	ExactlyOnceGoodput float64
	// PeakAmplification is the highest amplification of one scheduled
	// second of the timeline (Second.Amplification: the attempts of the
	// operations scheduled in it, per operation), and PeakSecond that
	// second: where a slow window shows that the run's average dilutes.
	PeakAmplification float64
	PeakSecond        int
	// AchievedRate is the operations started per second, from the run's
	// start to the last operation's first attempt.
	AchievedRate float64
	// Latency is the operations' latency, from the scheduled start to the
	// final answer (or to giving up); an operation that never started
	// counts as having taken the whole Timeout.
	Latency Latency
	// AttemptLatency is the latency of single attempts, from sending to
	// the end of the answer or of the error.
	AttemptLatency Latency
	// StartLag is the delay from an operation's scheduled start to the
	// sending of its first attempt.
	StartLag Latency
	// Timeline has the counts of every second of the run, from 0.
	Timeline []Second
}

// Operations counts load mode's operations.
type Operations struct {
	// Scheduled is Rate*Duration, rounded up.
	Scheduled int
	// Started counts the operations that sent an attempt.
	Started int
	// Completed counts the operations every copy of which got a final
	// answer: an original below 500 or a replay.
	Completed int
	// Failed counts the operations started and not completed: a copy gave
	// up (retries or Timeout spent) on a timeout, a transport error, an
	// answer that is not final, or a 5xx.
	Failed int
	// Late counts the operations whose first attempt had to wait for a
	// MaxInFlight slot.
	Late int
	// NotStarted counts the scheduled operations that sent nothing: the
	// run was interrupted, or their Timeout passed while they waited for a
	// slot.
	NotStarted int
}

// Second is one second of the timeline. Attempts are counted in the second
// they were sent, by how they were answered (the classes partition them:
// Originals excludes ServerErrors and TransportErrors excludes Timeouts);
// operations, late ones and the latency percentiles in the second they
// were scheduled.
type Second struct {
	// T is the second, from the start of the run.
	T int
	// Operations is the number of operations scheduled in it.
	Operations int
	// Completed counts those of them that completed (Operations.Completed).
	Completed int
	// Late counts those of them that started late.
	Late int
	// Attempts is the number of attempts sent in it.
	Attempts int
	// Originals counts attempts answered without the replay header, other
	// than 408, 409, 425, 429 and 5xx.
	Originals int
	// Replays counts attempts answered "Idempotent-Replayed: true".
	Replays int
	// InProgress counts non-replayed 409 answers.
	InProgress int
	// RetryLater counts non-replayed 408, 425, 429 and 503 answers.
	RetryLater int
	// ServerErrors counts non-replayed 5xx answers other than 503.
	ServerErrors int
	// Timeouts counts attempts the client's own timeout cut.
	Timeouts int
	// TransportErrors counts the other attempts without an HTTP answer.
	TransportErrors int
	// OperationAttempts counts the attempts of the operations scheduled in
	// this second, whenever they were sent (the probe's aside): what
	// Amplification divides.
	OperationAttempts int
	// P50 and P99 are the latency percentiles of the operations scheduled
	// in this second (those that never started count the whole Timeout).
	P50, P99 time.Duration
	// Scheduled is the number of operations the schedule put in this
	// second: Operations, and those an interrupted run never made.
	Scheduled int
	// Started is the number of operations whose first attempt was sent in
	// this second: the rate achieved, beside Scheduled.
	Started int
}

// Amplification returns the attempts sent for the operations scheduled in
// the second per operation (OperationAttempts / Operations), and false when
// none was scheduled in it. The retries of a slow second's operations
// count in that second, whenever they were sent.
func (s Second) Amplification() (float64, bool) {
	if s.Operations == 0 {
		return 0, false
	}
	return float64(s.OperationAttempts) / float64(s.Operations), true
}

// Threshold is one of load mode's thresholds (Config.MaxP99,
// MaxAmplification, MinGoodput, MinExactlyOnceGoodput,
// MaxPeakAmplification) and how the run measured against it.
type Threshold struct {
	// Name is the flag's: "max-p99", "max-amplification", "min-goodput",
	// "min-exactly-once-goodput" or "max-peak-amplification".
	Name string
	// Limit is the threshold, in Unit.
	Limit float64
	// Value is the run's figure, in Unit.
	Value float64
	// Unit is "ms" for max-p99, "" for the others.
	Unit string
	// OK reports whether the run kept to it.
	OK bool
}

// BrokenThresholds returns the thresholds the run broke.
func (r *Report) BrokenThresholds() []Threshold {
	var out []Threshold
	for _, arm := range r.Arms {
		out = append(out, arm.BrokenThresholds()...)
	}
	for _, t := range r.Thresholds {
		if !t.OK {
			out = append(out, t)
		}
	}
	return out
}

// String renders the threshold as "max-p99 820.0ms > 500.0ms": durations
// as the report's latencies are written.
func (t Threshold) String() string {
	cmp := "<="
	if strings.HasPrefix(t.Name, "min-") {
		cmp = ">="
	}
	if !t.OK {
		cmp = map[string]string{"<=": ">", ">=": "<"}[cmp]
	}
	v, l := t.format(t.Value), t.format(t.Limit)
	if v == l && t.Value != t.Limit && t.Unit == "ms" { // 2.004s and 2s: both "2.00s"
		v, l = msDuration(t.Value).String(), msDuration(t.Limit).String()
	}
	return fmt.Sprintf("%s %s %s %s", t.Name, v, cmp, l)
}

// msDuration converts milliseconds to a duration, to the microsecond.
func msDuration(v float64) time.Duration {
	return time.Duration(math.Round(v*1000)) * time.Microsecond
}

// format renders a value of the threshold in its unit.
func (t Threshold) format(v float64) string {
	if t.Unit == "ms" {
		return fmtDuration(msDuration(v))
	}
	return fmtFloat(v) + t.Unit
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

func fmtFloat(f float64) string {
	s := fmt.Sprintf("%.3f", f)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// liveHist is a coarse latency histogram for the progress line: counts in
// buckets of about 12%, taken and reset once a second. It is safe for
// concurrent use.
type liveHist struct{ counts [64 * 8]atomic.Int64 }

func histBucket(d time.Duration) int {
	n := uint64(max(d, 1))
	e := bits.Len64(n) - 1 // n in [2^e, 2^(e+1))
	m := 0
	if e >= 3 {
		m = int(n>>(e-3)) & 7
	}
	return e*8 + m
}

func (h *liveHist) add(d time.Duration) { h.counts[histBucket(d)].Add(1) }

// take returns the p99 of what was added since the last take (the upper
// bound of its bucket) and how many that was, and resets the counts.
func (h *liveHist) take() (time.Duration, int64) {
	var snap [64 * 8]int64
	var total int64
	for i := range h.counts {
		snap[i] = h.counts[i].Swap(0)
		total += snap[i]
	}
	if total == 0 {
		return 0, 0
	}
	want := int64(math.Ceil(0.99 * float64(total)))
	var seen int64
	for i, c := range snap {
		seen += c
		if seen >= want {
			e, m := i/8, i%8
			if e < 3 {
				return time.Duration(1) << (e + 1), total
			}
			return time.Duration(uint64(8+m+1) << (e - 3)), total
		}
	}
	return 0, total
}
