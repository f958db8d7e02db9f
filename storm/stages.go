package storm

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// maxStages bounds Config.Stages (and --stages).
const maxStages = 1000

// Stage is one stage of a ramping arrival rate (Config.Stages, --stages
// D:R): over Duration the rate of arrivals moves linearly from where the
// previous stage ended (the first from Config.Rate) to Rate, as k6's
// ramping-arrival-rate executor does. A stage whose rate does not change
// holds it; one from 0 to 0 is a pause.
type Stage struct {
	// Duration is the stage's length; positive.
	Duration time.Duration
	// Rate is the arrival rate, in operations per second, reached at the
	// stage's end; 0 or more.
	Rate float64
}

// String renders the stage as --stages takes it: "30s:100".
func (s Stage) String() string { return s.Duration.String() + ":" + fmtFloat(s.Rate) }

// ParseStages parses --stages' "D:R[,D:R…]" (e.g. "10s:100,30s:100,5s:0"):
// each D a positive duration, each R a rate of 0 or more operations per
// second. It returns an error, naming the stage, for anything else.
func ParseStages(s string) ([]Stage, error) {
	parts := strings.Split(s, ",")
	if len(parts) > maxStages {
		return nil, fmt.Errorf("at most %d stages", maxStages)
	}
	var out []Stage
	for i, p := range parts {
		d, r, ok := strings.Cut(strings.TrimSpace(p), ":")
		if !ok {
			return nil, fmt.Errorf("stage %d %q: want DURATION:RATE, e.g. 30s:100", i+1, p)
		}
		dur, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil {
			return nil, fmt.Errorf("stage %d %q: %v", i+1, p, err)
		}
		rate, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
		if err != nil {
			return nil, fmt.Errorf("stage %d %q: rate %q is not a number", i+1, p, r)
		}
		st := Stage{Duration: dur, Rate: rate}
		if err := st.check(); err != nil {
			return nil, fmt.Errorf("stage %d %q: %v", i+1, p, err)
		}
		out = append(out, st)
	}
	return out, nil
}

func (s Stage) check() error {
	switch {
	case s.Duration <= 0:
		return fmt.Errorf("duration must be positive, got %s", s.Duration)
	case !(s.Rate >= 0) || math.IsInf(s.Rate, 0):
		return fmt.Errorf("rate must be a number of 0 or more, got %v", s.Rate)
	}
	return nil
}

// stagesDuration returns the sum of the stages' durations, and false when
// it overflows.
func stagesDuration(stages []Stage) (time.Duration, bool) {
	var sum time.Duration
	for _, s := range stages {
		if s.Duration > math.MaxInt64-sum {
			return 0, false
		}
		sum += s.Duration
	}
	return sum, true
}

// schedule is load mode's arrival schedule: when each operation is due.
// Without stages the rate is constant; with them, the count of arrivals
// N(t) is the integral of a piecewise linear rate, and operation i is due
// at the first instant after which N exceeds i, so operation 0 starts at
// 0 unless the first stages are pauses.
type schedule struct {
	rate     float64 // constant rate, or the rate the first stage starts from
	duration time.Duration
	stages   []Stage
	from     []float64 // each stage's start rate
	cum      []float64 // arrivals before each stage, and after the last
	starts   []time.Duration
}

// newSchedule returns the schedule of rate for duration, or of the stages
// from rate when there are any (duration is then their sum).
func newSchedule(rate float64, duration time.Duration, stages []Stage) schedule {
	s := schedule{rate: rate, duration: duration, stages: stages}
	if len(stages) == 0 {
		return s
	}
	r0, n, at := rate, 0.0, time.Duration(0)
	for _, st := range stages {
		s.from, s.cum, s.starts = append(s.from, r0), append(s.cum, n), append(s.starts, at)
		n += (r0 + st.Rate) / 2 * st.Duration.Seconds()
		r0, at = st.Rate, at+st.Duration
	}
	s.cum = append(s.cum, n)
	s.duration = at
	return s
}

// arrivals returns N(T), the arrivals the whole schedule makes, unrounded.
func (s schedule) arrivals() float64 {
	if len(s.stages) == 0 {
		return s.rate * s.duration.Seconds()
	}
	return s.cum[len(s.cum)-1]
}

// total returns the number of operations scheduled: N(T), rounded up.
func (s schedule) total() int { return int(math.Ceil(s.arrivals() - 1e-9)) }

// due returns when operation i (0 to total-1) is due, from the start.
func (s schedule) due(i int) time.Duration {
	if len(s.stages) == 0 {
		return time.Duration(float64(i) * (float64(time.Second) / s.rate))
	}
	n := float64(i)
	// The first stage whose end count exceeds i holds its arrival.
	k := sort.Search(len(s.stages), func(k int) bool { return s.cum[k+1] > n })
	if k == len(s.stages) {
		return s.duration
	}
	st, r0 := s.stages[k], s.from[k]
	left := n - s.cum[k]
	if left <= 0 {
		return s.starts[k]
	}
	// r0·τ + (r1−r0)·τ²/(2d) = left, solved in the form that holds for a
	// constant, a rising and a falling rate alike.
	d := st.Duration.Seconds()
	disc := max(0, r0*r0+2*(st.Rate-r0)*left/d)
	tau := 2 * left / (r0 + math.Sqrt(disc))
	return s.starts[k] + min(time.Duration(tau*float64(time.Second)), st.Duration)
}

// rateAt returns the scheduled arrival rate at t, in operations per
// second; 0 after the schedule's end.
func (s schedule) rateAt(t time.Duration) float64 {
	if t < 0 || t >= s.duration {
		return 0
	}
	if len(s.stages) == 0 {
		return s.rate
	}
	k := sort.Search(len(s.stages), func(k int) bool { return s.starts[k]+s.stages[k].Duration > t })
	if k == len(s.stages) {
		return 0
	}
	st, r0 := s.stages[k], s.from[k]
	frac := float64(t-s.starts[k]) / float64(st.Duration)
	return r0 + (st.Rate-r0)*frac
}

// stagesText renders stages as --stages takes them.
func stagesText(stages []Stage) string {
	parts := make([]string, len(stages))
	for i, s := range stages {
		parts[i] = s.String()
	}
	return strings.Join(parts, ",")
}

// loadShape renders the schedule for the reports: "100 operations/s for
// 10s", or with stages "stages 10s:100,20s:100 from 0 operations/s (30s)".
func loadShape(rate float64, duration time.Duration, stages []Stage) string {
	if len(stages) == 0 {
		return fmt.Sprintf("%s operations/s for %s", fmtFloat(rate), duration)
	}
	return fmt.Sprintf("stages %s from %s operations/s (%s)", stagesText(stages), fmtFloat(rate), duration)
}

// checkStages checks Config.Stages against the rest of cfg.
func checkStages(cfg *Config) error {
	if len(cfg.Stages) > maxStages {
		return fmt.Errorf("at most %d stages", maxStages)
	}
	for i, s := range cfg.Stages {
		if err := s.check(); err != nil {
			return fmt.Errorf("stage %d (%s): %v", i+1, s, err)
		}
	}
	sum, ok := stagesDuration(cfg.Stages)
	switch {
	case !ok:
		return fmt.Errorf("the stages last too long")
	case cfg.Duration != 0 && cfg.Duration != sum:
		return fmt.Errorf("duration %s differs from the stages' sum %s: the run lasts the sum of the stages", cfg.Duration, sum)
	}
	return nil
}

// stageJSON is one of load mode's stages, in the history's header.
type stageJSON struct {
	DurationNS int64   `json:"duration_ns"`
	Rate       float64 `json:"rate"`
}

// jsonStage is one of load mode's stages, in the JSON report.
type jsonStage struct {
	DurationMS float64 `json:"duration_ms"`
	Rate       float64 `json:"rate"`
}
