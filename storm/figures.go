package storm

import (
	"math"
	"slices"
	"time"
)

// load computes load mode's figures from the history (Report.Load); the
// keys' verdicts are in.
func (c *checker) load() *Load {
	s, rep := c.s, c.rep
	ld := &Load{
		Rate: s.Rate, Duration: s.Duration, MaxInFlight: s.MaxInFlight, AttemptTimeout: s.AttemptTimeout,
		MaxRetries: s.Retries, BaseDelay: s.BaseDelay, MaxDelay: s.MaxDelay, Stages: s.Stages,
	}
	ld.Operations.Scheduled = s.Keys
	var opLat, attLat, lags []time.Duration
	var seconds []Second
	var perSecond [][]time.Duration
	at := func(d time.Duration) *Second {
		i := int(max(0, d) / time.Second)
		for len(seconds) <= i {
			seconds = append(seconds, Second{T: len(seconds)})
			perSecond = append(perSecond, nil)
		}
		return &seconds[i]
	}
	var lastOf []*Attempt // each copy's last attempt, by copy
	var lastStart time.Duration
	exactlyOnce := 0
	for i := range c.h.Operations {
		op := &c.h.Operations[i]
		sec := at(op.Scheduled)
		sec.Operations++
		sec.Scheduled++
		if op.Late {
			sec.Late++
			ld.Operations.Late++
		}
		opAttempts := 0
		lastOf = lastOf[:0]
		first := time.Duration(-1)
		for j := range op.Attempts {
			a := &op.Attempts[j]
			if a.Probe {
				continue
			}
			ld.Attempts++
			opAttempts++
			attLat = append(attLat, a.Done-a.Sent)
			countClass(at(a.Sent), a.Class)
			if a.Attempt == 1 && (first < 0 || a.Sent < first) {
				first = a.Sent
			}
			for len(lastOf) <= a.Copy {
				lastOf = append(lastOf, nil)
			}
			if lastOf[a.Copy] == nil || a.Attempt > lastOf[a.Copy].Attempt {
				lastOf[a.Copy] = a
			}
		}
		// sec may point into an older array: the attempts grew seconds.
		seconds[sec.T].OperationAttempts += opAttempts
		if first < 0 {
			// Never started: it counts as having taken the whole timeout,
			// so that the survivors cannot make the latency.
			opLat = append(opLat, s.Timeout)
			perSecond[sec.T] = append(perSecond[sec.T], s.Timeout)
			continue
		}
		ld.Operations.Started++
		at(first).Started++
		completed := len(lastOf) >= s.Dups // a copy that sent nothing did not complete
		for _, a := range lastOf {
			completed = completed && a != nil && a.final() && a.Class != ClassServerError
		}
		if completed {
			sec.Completed++
			ld.Operations.Completed++
			if c.verdicts[c.unitOf[i]].class == classPassed {
				exactlyOnce++
			}
		} else {
			ld.Operations.Failed++
		}
		lat := op.Ended - op.Scheduled
		opLat = append(opLat, lat)
		lags = append(lags, max(0, first-op.Scheduled))
		perSecond[sec.T] = append(perSecond[sec.T], lat)
		lastStart = max(lastStart, first)
	}
	ld.Operations.NotStarted = ld.Operations.Scheduled - ld.Operations.Started
	if s.Rate > 0 || len(s.Stages) > 0 {
		// What an interrupted run never made was scheduled all the same;
		// a merged history has no one schedule (its total differs).
		if sched := newSchedule(s.Rate, s.Duration, s.Stages); sched.total() == s.Keys {
			for i := len(c.h.Operations); i < s.Keys; i++ {
				at(sched.due(i)).Scheduled++
			}
		}
	}
	for i := range seconds {
		p := percentiles(perSecond[i])
		seconds[i].P50, seconds[i].P99 = p.P50, p.P99
		if a, ok := seconds[i].Amplification(); ok && a > ld.PeakAmplification {
			ld.PeakAmplification, ld.PeakSecond = a, seconds[i].T
		}
	}
	ld.Timeline = seconds
	ld.Latency, ld.AttemptLatency, ld.StartLag = percentiles(opLat), percentiles(attLat), percentiles(lags)
	if ld.Operations.Started > 0 {
		ld.Amplification = float64(ld.Attempts) / float64(ld.Operations.Started)
	}
	window := s.Duration
	if interruptedHistory(c.h) && rep.Elapsed > 0 {
		window = min(window, rep.Elapsed)
	}
	if window > 0 {
		ld.Goodput = float64(ld.Operations.Completed) / window.Seconds()
		ld.ExactlyOnceGoodput = float64(exactlyOnce) / window.Seconds()
	}
	switch {
	case ld.Operations.Started > 0 && s.Rate > 0 && len(s.Stages) == 0:
		ld.AchievedRate = float64(ld.Operations.Started) / (lastStart + time.Duration(float64(time.Second)/s.Rate)).Seconds()
	case ld.Operations.Started > 0 && s.Duration > 0: // a ramp: over the schedule
		ld.AchievedRate = float64(ld.Operations.Started) / max(s.Duration, lastStart).Seconds()
	}
	rep.Latency = ld.Latency
	return ld
}

// countClass counts an attempt in its second of the timeline, where the
// classes partition the attempts: Originals without the 5xx,
// TransportErrors without the timeouts.
func countClass(s *Second, c Class) {
	s.Attempts++
	switch c {
	case ClassTimeout:
		s.Timeouts++
	case ClassTransportError:
		s.TransportErrors++
	case ClassReplay:
		s.Replays++
	case ClassInProgress:
		s.InProgress++
	case ClassRetryLater:
		s.RetryLater++
	case ClassServerError:
		s.ServerErrors++
	default:
		s.Originals++
	}
}

// thresholds checks the run against the thresholds, in a fixed order.
func (s Settings) thresholds(rep *Report) []Threshold {
	if rep.Load == nil {
		return nil
	}
	ld := rep.Load
	var out []Threshold
	if s.MaxP99 > 0 {
		out = append(out, Threshold{Name: "max-p99", Limit: ms(s.MaxP99), Value: ms(ld.Latency.P99), Unit: "ms", OK: ld.Latency.P99 <= s.MaxP99})
	}
	if s.MaxAmplification > 0 {
		out = append(out, Threshold{Name: "max-amplification", Limit: s.MaxAmplification, Value: round3(ld.Amplification),
			OK: ld.Amplification <= s.MaxAmplification})
	}
	if s.MinGoodput > 0 {
		out = append(out, Threshold{Name: "min-goodput", Limit: s.MinGoodput, Value: round3(ld.Goodput), OK: ld.Goodput >= s.MinGoodput})
	}
	if s.MinExactlyOnceGoodput > 0 {
		out = append(out, Threshold{Name: "min-exactly-once-goodput", Limit: s.MinExactlyOnceGoodput, Value: round3(ld.ExactlyOnceGoodput),
			OK: ld.ExactlyOnceGoodput >= s.MinExactlyOnceGoodput})
	}
	if s.MaxPeakAmplification > 0 {
		out = append(out, Threshold{Name: "max-peak-amplification", Limit: s.MaxPeakAmplification, Value: round3(ld.PeakAmplification),
			OK: ld.PeakAmplification <= s.MaxPeakAmplification})
	}
	return append(out, s.recoveryThreshold(rep)...)
}

// percentiles computes nearest-rank latency percentiles; it sorts ds.
func percentiles(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p/100*float64(len(ds)))) - 1
		return ds[max(0, min(i, len(ds)-1))]
	}
	return Latency{P50: rank(50), P90: rank(90), P99: rank(99), Max: ds[len(ds)-1]}
}
