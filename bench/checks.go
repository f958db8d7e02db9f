package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Thresholds the harness checks.
const (
	// MinFirstOursLimit is the least first-execution throughput of ours
	// relative to the limit handler, in the same run.
	MinFirstOursLimit = 0.85
	// MinReplayOursLimitFirst is the least replay throughput of ours
	// relative to the limit's first executions: a replay is one round trip
	// where a first execution is two.
	MinReplayOursLimitFirst = 1.0
	// MaxFixedSpread bounds how much the fixed memory overhead of a record
	// may vary with its body's size, for it to be called fixed.
	MaxFixedSpread = 64
)

// Check names, stable for tests.
const (
	CheckRoundTrips   = "round trips"
	CheckFirstRatio   = "first execution: ours / limit"
	CheckReplayRatio  = "replay: ours / limit's first execution"
	CheckStorm        = "storm, single node"
	CheckStormTwo     = "storm, two instances"
	CheckStormCluster = "storm, cluster"
	CheckMemoryFixed  = "memory overhead is fixed"
)

func (r *runner) add(name, want, got string, pass bool) {
	r.res.Checks = append(r.res.Checks, Check{Name: name, Want: want, Got: got, Pass: pass})
}

// costOf returns the cost measured for contender and case, or nil.
func (res *Results) costOf(contender, name string) *Cost {
	for i := range res.Cost {
		if c := &res.Cost[i]; c.Contender == contender && c.Case == name {
			return c
		}
	}
	return nil
}

func (r *runner) checks() {
	res := r.res
	if r.cfg.has(PhaseCost) {
		for _, w := range []struct {
			name string
			want float64
		}{
			{CaseFirst, 2}, {CaseReplay, 1}, {CaseInProgress, 0}, {CaseMismatch, 1}, {CaseDoFirst, 2}, {CaseDoReplay, 1}, // a 409 from the process that runs the key is answered in-process (collapse)
		} {
			c := res.costOf(Ours, w.name)
			if c == nil {
				continue
			}
			got := fmt.Sprintf("%g sent, %g EVALSHA + %g EVAL + %g other on the server", c.RoundTrips, c.EvalSHA, c.Eval, c.OtherTopLevel)
			r.add(CheckRoundTrips+", "+w.name, strconv.FormatFloat(w.want, 'g', -1, 64)+" per request",
				got, c.RoundTrips == w.want && c.ServerRoundTrips == w.want && c.Eval == 0)
		}
	}
	if r.cfg.has(PhaseFirst) {
		m := res.Median.FirstOursLimit
		r.add(CheckFirstRatio, fmt.Sprintf("≥ %.2f (median of %d rounds)", MinFirstOursLimit, len(res.Rounds)),
			fmt.Sprintf("%.3f (by CPU %.3f: ours costs %.1f µs more per request)", m, res.Median.FirstOursLimitCPU, res.Median.FirstExtraCPUUS), m >= MinFirstOursLimit)
	}
	if r.cfg.has(PhaseReplay) && r.cfg.has(PhaseFirst) {
		m := res.Median.ReplayOursLimitFirst
		r.add(CheckReplayRatio, fmt.Sprintf("≥ %.2f", MinReplayOursLimitFirst),
			fmt.Sprintf("%.3f (ours replay / limit replay: %.3f)", m, res.Median.ReplayOursLimit), m >= MinReplayOursLimitFirst)
	}
	if r.cfg.has(PhaseStorm) {
		pass, gots := true, []string{}
		for _, rd := range res.Rounds {
			s := rd.Storm[Ours]
			pass = pass && s.ExactlyOnce()
			gots = append(gots, stormGot(s))
		}
		got := strings.Join(gots, "; ")
		if slices.Equal(gots, slices.Repeat(gots[:1], len(gots))) {
			got = fmt.Sprintf("%d/%d rounds: %s", len(gots), len(gots), gots[0])
		}
		r.add(CheckStorm, stormWant(r.cfg)+", every round", got, pass)
		if s := res.StormTwoInstances; s != nil {
			r.add(CheckStormTwo, stormWant(r.cfg), stormGot(s), s.ExactlyOnce())
		}
	}
	if c := res.Cluster; c != nil {
		r.add(CheckStormCluster, stormWant(r.cfg)+fmt.Sprintf(", %d masters", c.Masters),
			stormGot(c.Storm)+fmt.Sprintf(", records per master %v", c.RecordsPerMaster), c.Storm.ExactlyOnce())
	}
	if len(res.Memory) > 0 {
		lo, hi := res.Memory[0].Fixed, res.Memory[0].Fixed
		for _, m := range res.Memory {
			lo, hi = min(lo, m.Fixed), max(hi, m.Fixed)
		}
		r.add(CheckMemoryFixed, fmt.Sprintf("usage = body + fixed overhead + allocator slack, fixed part within %d B across body sizes", MaxFixedSpread),
			fmt.Sprintf("fixed %d–%d B", lo, hi), hi-lo <= MaxFixedSpread)
	}
}

func stormWant(cfg Config) string {
	return fmt.Sprintf("%d keys x %d dups at concurrency %d: verdict pass, %d handler executions, none twice",
		cfg.StormKeys, cfg.StormDups, cfg.StormConcurrency, cfg.StormKeys)
}

func stormGot(s *StormResult) string {
	return fmt.Sprintf("%s, %d executions (max %d per key), %d divergent, %d errors",
		s.Verdict, s.HandlerExecutions, s.ExecutionsMax, s.DivergentKeys, s.Errors)
}

// Pass reports whether every check passed.
func (res *Results) Pass() bool {
	for _, c := range res.Checks {
		if !c.Pass {
			return false
		}
	}
	return true
}

// Check returns the check of that name, or nil.
func (res *Results) Check(name string) *Check {
	for i := range res.Checks {
		if res.Checks[i].Name == name {
			return &res.Checks[i]
		}
	}
	return nil
}
