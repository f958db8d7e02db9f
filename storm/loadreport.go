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
	// Rate is the operations scheduled per second (Config.Rate).
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

	// Operations counts the operations by what became of them.
	Operations Operations
	// Attempts is the number of attempts sent, retries included.
	Attempts int
	// Amplification is Attempts per operation started.
	Amplification float64
	// Goodput is the operations completed per second of the schedule.
	Goodput float64
	// AchievedRate is the operations started per second, from the run's
	// start to the last operation's first attempt.
	AchievedRate float64
	// Latency is the operations' latency, from the scheduled start to the
	// final answer (or to giving up), over the operations started.
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
	// P50 and P99 are the latency percentiles of the operations scheduled
	// in this second.
	P50, P99 time.Duration
}

// Amplification returns the second's attempts per operation scheduled in
// it, and false when none was.
func (s Second) Amplification() (float64, bool) {
	if s.Operations == 0 {
		return 0, false
	}
	return float64(s.Attempts) / float64(s.Operations), true
}

// report computes load mode's figures from the operations' attempts.
func (l *loader) report(keys []*keyRun, rep *Report) *Load {
	cfg := l.cfg
	ld := &Load{
		Rate: cfg.Rate, Duration: cfg.Duration, MaxInFlight: cfg.MaxInFlight, AttemptTimeout: cfg.AttemptTimeout,
		MaxRetries: cfg.Retries, BaseDelay: cfg.Policy.BaseDelay, MaxDelay: cfg.Policy.MaxDelay,
	}
	ld.Operations.Scheduled = cfg.operations()
	var opLat, attLat, lags []time.Duration
	var seconds []Second
	var perSecond [][]time.Duration
	at := func(d time.Duration) *Second {
		s := int(max(0, d) / time.Second)
		for len(seconds) <= s {
			seconds = append(seconds, Second{T: len(seconds)})
			perSecond = append(perSecond, nil)
		}
		return &seconds[s]
	}
	var lastStart time.Duration
	for _, k := range keys {
		k.mu.Lock()
		op, attempts := *k.op, k.attempts
		k.mu.Unlock()
		sec := at(op.due)
		sec.Operations++
		if op.late {
			sec.Late++
			ld.Operations.Late++
		}
		if !op.started {
			continue
		}
		ld.Operations.Started++
		if op.failed {
			ld.Operations.Failed++
		} else {
			ld.Operations.Completed++
		}
		lat := op.end - op.due
		opLat = append(opLat, lat)
		lags = append(lags, op.lag)
		perSecond[sec.T] = append(perSecond[sec.T], lat)
		lastStart = max(lastStart, op.due+op.lag)
		for _, a := range attempts {
			ld.Attempts++
			attLat = append(attLat, a.latency)
			s := at(a.start)
			s.Attempts++
			switch kindOf(a) {
			case kindTransport:
				if a.timeout {
					s.Timeouts++
				} else {
					s.TransportErrors++
				}
			case kindReplay:
				s.Replays++
			case kindInProgress:
				s.InProgress++
			case kindRetryLater:
				s.RetryLater++
			default:
				if a.status >= 500 {
					s.ServerErrors++
				} else {
					s.Originals++
				}
			}
		}
	}
	ld.Operations.NotStarted = ld.Operations.Scheduled - ld.Operations.Started
	for i := range seconds {
		p := percentiles(perSecond[i])
		seconds[i].P50, seconds[i].P99 = p.P50, p.P99
	}
	ld.Timeline = seconds
	ld.Latency, ld.AttemptLatency, ld.StartLag = percentiles(opLat), percentiles(attLat), percentiles(lags)
	if ld.Operations.Started > 0 {
		ld.Amplification = float64(ld.Attempts) / float64(ld.Operations.Started)
	}
	window := cfg.Duration
	if rep.Interrupted {
		window = min(window, rep.Elapsed)
	}
	if window > 0 {
		ld.Goodput = float64(ld.Operations.Completed) / window.Seconds()
	}
	if ld.Operations.Started > 0 {
		ld.AchievedRate = float64(ld.Operations.Started) / (lastStart + time.Duration(float64(time.Second)/cfg.Rate)).Seconds()
	}
	rep.Latency = ld.Latency
	return ld
}

// Threshold is one of load mode's thresholds (Config.MaxP99,
// MaxAmplification, MinGoodput) and how the run measured against it.
type Threshold struct {
	// Name is the flag's: "max-p99", "max-amplification" or "min-goodput".
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

// thresholds checks the run against cfg's thresholds, in a fixed order.
func (cfg Config) thresholds(rep *Report) []Threshold {
	if rep.Load == nil {
		return nil
	}
	ld := rep.Load
	var out []Threshold
	if cfg.MaxP99 > 0 {
		v := ms(ld.Latency.P99)
		out = append(out, Threshold{Name: "max-p99", Limit: ms(cfg.MaxP99), Value: v, Unit: "ms", OK: ld.Latency.P99 <= cfg.MaxP99})
	}
	if cfg.MaxAmplification > 0 {
		v := round3(ld.Amplification)
		out = append(out, Threshold{Name: "max-amplification", Limit: cfg.MaxAmplification, Value: v, OK: ld.Amplification <= cfg.MaxAmplification})
	}
	if cfg.MinGoodput > 0 {
		v := round3(ld.Goodput)
		out = append(out, Threshold{Name: "min-goodput", Limit: cfg.MinGoodput, Value: v, OK: ld.Goodput >= cfg.MinGoodput})
	}
	return out
}

// BrokenThresholds returns the thresholds the run broke.
func (r *Report) BrokenThresholds() []Threshold {
	var out []Threshold
	for _, t := range r.Thresholds {
		if !t.OK {
			out = append(out, t)
		}
	}
	return out
}

// String renders the threshold as "max-p99 820ms > 500ms".
func (t Threshold) String() string {
	cmp := "<="
	if t.Name == "min-goodput" {
		cmp = ">="
	}
	if !t.OK {
		cmp = map[string]string{"<=": ">", ">=": "<"}[cmp]
	}
	return fmt.Sprintf("%s %s%s %s %s%s", t.Name, fmtFloat(t.Value), t.Unit, cmp, fmtFloat(t.Limit), t.Unit)
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
