package bench

import (
	"fmt"
	"maps"
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

// Check names, stable for tests. Round trips and commands checks are named
// "<check>, <case>"; storm checks of a variant of ours "<check>, <variant>".
const (
	CheckRoundTrips   = "round trips"
	CheckCommands     = "commands"
	CheckFirstRatio   = "first execution: ours / limit"
	CheckReplayRatio  = "replay: ours / limit's first execution"
	CheckStorm        = "storm, single node"
	CheckStormTwo     = "storm, two instances"
	CheckStormCluster = "storm, cluster"
	CheckMemoryFixed  = "memory overhead is fixed"
)

// Target names (the plain path at the floor's cost, then the pipelined
// store's lead and the storm's round trips), stable for tests.
const (
	TargetFirstFloor      = "first execution: ours / floor"
	TargetReplayFloor     = "replay: ours / floor's replay"
	TargetServerCPU       = "server CPU per first execution: ours - floor"
	TargetAllocs          = "allocations per first execution, ours"
	TargetAllocsReplay    = "allocations per replay, ours"
	TargetPipelinedLimit  = "first execution: ours-pipelined / limit"
	TargetRedisCPU        = "Redis CPU per first execution: ours - floor"
	TargetPipelinedLimitP = "first execution: ours-pipelined / limit-pipelined"
	TargetReplayBest      = "replay: best ours / limit's first execution"
	TargetStormCommands   = "storm: Redis commands per key, best ours"
	TargetStormScripts    = "storm: requests Redis served per key, best ours"
	TargetStormSpeedup    = "storm: best variant / ours-nocollapse, req/s"
)

// Targets: the plain path at the floor's cost (where the best Go peer
// stands), which replace the earlier, looser ones for the same figures
// (in the comments), then the pipelined store's lead and the storm's round
// trips.
const (
	MinFirstOursFloor       = 0.95 // was 0.92
	MinReplayOursFloor      = 0.95
	MaxServerCPUOverFloorUS = 6 // was 8
	// MaxAllocsFirst and MaxAllocsReplay are a dozen and four above the
	// floor's own (68 and 46: Gin, go-redis and the handler). The earlier
	// 62, half of the 124 then measured, was below the floor.
	MaxAllocsFirst  = 80
	MaxAllocsReplay = 50
	// MinFirstPipelinedLimit: the pipelined store's lead over the plain
	// limit must not shrink while the plain path gets cheaper (it was 1.3,
	// then 1.55 when the plain path's targets were set).
	MinFirstPipelinedLimit  = 1.5
	MaxRedisCPUOverFloorUS  = 5
	MinFirstPipelinedLimitP = 0.9
	MinReplayBestLimitFirst = 2.0
	MaxStormCommandsPerKey  = 2.5
	// MaxStormScriptsPerKey is the storm's "about 2 round trips per key",
	// counted as the requests Redis served (EVALSHA), pipelined or not.
	MaxStormScriptsPerKey   = 2.5
	MinStormSpeedupOverOurs = 1.5
)

// costWant is what each case of ours may cost: round trips exactly, and
// commands in all (EVALSHA counted) at most.
var costWant = []struct {
	name     string
	trips    float64
	commands float64
}{
	// A 409 from the instance that runs the key is answered there, with no
	// Redis call (in-process collapse); from another instance it costs 1
	// round trip and 3 commands (EVALSHA, SET NX GET, PTTL: redisstore's
	// TestRoundTrips).
	{CaseFirst, 2, 6}, {CaseReplay, 1, 2}, {CaseInProgress, 0, 0}, {CaseMismatch, 1, 2}, {CaseDoFirst, 2, 6}, {CaseDoReplay, 1, 2},
}

func (r *runner) add(name, want, got string, pass bool) {
	r.res.Checks = append(r.res.Checks, Check{Name: name, Want: want, Got: got, Pass: pass})
}

func (r *runner) target(name, want, got string, pass bool) {
	r.res.Targets = append(r.res.Targets, Check{Name: name, Want: want, Got: got, Pass: pass})
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

// allocsOf returns the allocations measured for contender and case, or nil.
func (res *Results) allocsOf(contender, name string) *Allocs {
	for i := range res.Allocs {
		if a := &res.Allocs[i]; a.Contender == contender && a.Case == name {
			return a
		}
	}
	return nil
}

// commandsGot describes c: "4 (2 EVALSHA + 2 in scripts: set 2)".
func commandsGot(c Commands) string {
	var names []string
	for _, k := range slices.Sorted(maps.Keys(c.ByName)) {
		names = append(names, fmt.Sprintf("%s %g", k, c.ByName[k]))
	}
	got := fmt.Sprintf("%g (%g EVALSHA", c.Total, c.EvalSHA)
	if c.Eval > 0 {
		got += fmt.Sprintf(" + %g EVAL", c.Eval)
	}
	got += fmt.Sprintf(" + %g in scripts", c.Script)
	if c.Other > 0 {
		got += fmt.Sprintf(" + %g other", c.Other)
	}
	if len(names) > 0 {
		got += ": " + strings.Join(names, ", ")
	}
	return got + ")"
}

// variant returns the suffix of a check about name: "" for ours.
func variant(name string) string {
	if name == Ours {
		return ""
	}
	return ", " + name
}

func (r *runner) checks() {
	res := r.res
	m := res.Median
	if r.cfg.has(PhaseCost) {
		for _, w := range costWant {
			c := res.costOf(Ours, w.name)
			if c == nil {
				continue
			}
			got := fmt.Sprintf("%g sent, %g EVALSHA + %g EVAL + %g other on the server", c.RoundTrips, c.Server.EvalSHA, c.Server.Eval, c.Server.Other)
			r.add(CheckRoundTrips+", "+w.name, strconv.FormatFloat(w.trips, 'g', -1, 64)+" per request",
				got, c.RoundTrips == w.trips && c.Server.TopLevel() == w.trips && c.Server.Eval == 0)
		}
		for _, w := range costWant {
			c := res.costOf(Ours, w.name)
			if c == nil {
				continue
			}
			r.add(CheckCommands+", "+w.name, fmt.Sprintf("≤ %g per request, EVALSHA and the scripts' commands", w.commands),
				commandsGot(c.Server), c.Server.Total <= w.commands)
		}
	}
	if v, ok := m.Ratios[ratioName(PhaseFirst, Ours, PhaseFirst, Limit)]; ok {
		r.add(CheckFirstRatio, fmt.Sprintf("≥ %.2f (median of %d rounds)", MinFirstOursLimit, len(res.Rounds)),
			fmt.Sprintf("%.3f (by CPU %.3f)", v, m.CPURatios[ratioName(PhaseFirst, Ours, PhaseFirst, Limit)]), v >= MinFirstOursLimit)
	}
	if v, ok := m.Ratios[ratioName(PhaseReplay, Ours, PhaseFirst, Limit)]; ok {
		r.add(CheckReplayRatio, fmt.Sprintf("≥ %.2f", MinReplayOursLimitFirst),
			fmt.Sprintf("%.3f (ours replay / limit replay: %.3f)", v, m.Ratios[ratioName(PhaseReplay, Ours, PhaseReplay, Limit)]), v >= MinReplayOursLimitFirst)
	}
	if r.cfg.has(PhaseStorm) && len(res.Rounds) > 0 {
		for _, n := range r.ours() {
			pass, gots := true, []string{}
			for _, rd := range res.Rounds {
				s := rd.Storm[n]
				pass = pass && s.ExactlyOnce()
				gots = append(gots, stormGot(s))
			}
			got := strings.Join(gots, "; ")
			if slices.Equal(gots, slices.Repeat(gots[:1], len(gots))) {
				got = fmt.Sprintf("%d/%d rounds: %s", len(gots), len(gots), gots[0])
			}
			r.add(CheckStorm+variant(n), stormWant(r.cfg)+", every round", got, pass)
		}
		for _, s := range res.StormTwoInstances {
			r.add(CheckStormTwo+variant(s.Contender), stormWant(r.cfg), stormGot(s), s.ExactlyOnce())
		}
	}
	for _, c := range res.Cluster {
		r.add(CheckStormCluster+variant(c.Storm.Contender), stormWant(r.cfg)+fmt.Sprintf(", %d masters", c.Masters),
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
	r.targets()
}

// targets reports where the run stands against the targets.
func (r *runner) targets() {
	res := r.res
	m := res.Median
	atLeast := func(name, ratio string, want float64) {
		if v, ok := m.Ratios[ratio]; ok {
			got := fmt.Sprintf("%.3f", v)
			if c, ok := m.CPURatios[ratio]; ok {
				got += fmt.Sprintf(" (by CPU %.3f)", c)
			}
			r.target(name, fmt.Sprintf("≥ %.2f", want), got, v >= want)
		}
	}
	atLeast(TargetFirstFloor, ratioName(PhaseFirst, Ours, PhaseFirst, Floor), MinFirstOursFloor)
	atLeast(TargetReplayFloor, ratioName(PhaseReplay, Ours, PhaseReplay, Floor), MinReplayOursFloor)
	o, ok1 := m.First[Ours]
	f, ok2 := m.First[Floor]
	if ok1 && ok2 {
		d := round1(o.CPUUS - f.CPUUS)
		r.target(TargetServerCPU, fmt.Sprintf("≤ %d µs", MaxServerCPUOverFloorUS),
			fmt.Sprintf("%.1f µs (ours %.1f, floor %.1f; runner process: servers and load generator)", d, o.CPUUS, f.CPUUS), d <= MaxServerCPUOverFloorUS)
	}
	allocs := func(name, cs string, most int) {
		if a := res.allocsOf(Ours, cs); a != nil {
			got := fmt.Sprintf("%.0f allocs, %.0f B per request", a.PerOp, a.BytesOp)
			if fl := res.allocsOf(Floor, cs); fl != nil {
				got += fmt.Sprintf(" (floor %.0f, %.0f B)", fl.PerOp, fl.BytesOp)
			}
			r.target(name, fmt.Sprintf("≤ %d", most), got, a.PerOp <= float64(most))
		}
	}
	allocs(TargetAllocs, CaseFirst, MaxAllocsFirst)
	allocs(TargetAllocsReplay, CaseReplay, MaxAllocsReplay)
	atLeast(TargetPipelinedLimit, ratioName(PhaseFirst, OursPipelined, PhaseFirst, Limit), MinFirstPipelinedLimit)
	if ok1 && ok2 {
		d := round1(o.RedisCPUUS - f.RedisCPUUS)
		r.target(TargetRedisCPU, fmt.Sprintf("≤ %d µs", MaxRedisCPUOverFloorUS),
			fmt.Sprintf("%.1f µs (ours %.1f, floor %.1f)", d, o.RedisCPUUS, f.RedisCPUUS), d <= MaxRedisCPUOverFloorUS)
	}
	atLeast(TargetPipelinedLimitP, ratioName(PhaseFirst, OursPipelined, PhaseFirst, LimitPipelined), MinFirstPipelinedLimitP)

	// The best variant of ours for each figure.
	best := func(f func(n string) (float64, bool), higher bool) (string, float64) {
		var bn string
		var bv float64
		for _, n := range r.ours() {
			v, ok := f(n)
			if ok && (bn == "" || (higher && v > bv) || (!higher && v < bv)) {
				bn, bv = n, v
			}
		}
		return bn, bv
	}
	if n, v := best(func(n string) (float64, bool) {
		v, ok := m.Ratios[ratioName(PhaseReplay, n, PhaseFirst, Limit)]
		return v, ok
	}, true); n != "" {
		r.target(TargetReplayBest, fmt.Sprintf("≥ %.1f", MinReplayBestLimitFirst), fmt.Sprintf("%.3f (%s)", v, n), v >= MinReplayBestLimitFirst)
	}
	if n, v := best(func(n string) (float64, bool) {
		s, ok := m.Storm[n]
		return s.CommandsPerKey, ok
	}, false); n != "" {
		r.target(TargetStormCommands, fmt.Sprintf("≤ %.1f (%d keys x %d dups at concurrency %d, one instance)", MaxStormCommandsPerKey,
			r.cfg.StormKeys, r.cfg.StormDups, r.cfg.StormConcurrency), fmt.Sprintf("%.2f (%s)", v, n), v <= MaxStormCommandsPerKey)
	}
	if n, v := best(func(n string) (float64, bool) {
		s, ok := m.Storm[n]
		return s.ScriptsPerKey, ok
	}, false); n != "" {
		r.target(TargetStormScripts, fmt.Sprintf("≤ %.1f (EVALSHA per key, one instance)", MaxStormScriptsPerKey),
			fmt.Sprintf("%.2f (%s)", v, n), v <= MaxStormScriptsPerKey)
	}
	if n, v := best(func(n string) (float64, bool) {
		if n == OursNoCollapse {
			return 0, false
		}
		v, ok := m.Ratios[ratioName(PhaseStorm, n, PhaseStorm, OursNoCollapse)]
		return v, ok
	}, true); n != "" {
		r.target(TargetStormSpeedup, fmt.Sprintf("≥ %.1f", MinStormSpeedupOverOurs), fmt.Sprintf("%.3f (%s)", v, n), v >= MinStormSpeedupOverOurs)
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
