package bench

import (
	"slices"
	"strings"
)

// A measure is one contender's figure in one phase of a round.
type measure struct {
	phase     string // PhaseFirst, PhaseReplay or PhaseStorm
	contender string
}

// ratioDef is one throughput ratio, num over den, measured within a round.
type ratioDef struct {
	num, den measure
}

// Name is how RESULTS.md and the JSON call it: "first: ours / floor",
// "replay: ours / limit" (replays of both), "replay: ours / limit first"
// (ours' replays over the limit's first executions).
func (d ratioDef) Name() string {
	den := d.den.contender
	if d.den.phase != d.num.phase {
		den += " " + d.den.phase
	}
	return d.num.phase + ": " + d.num.contender + " / " + den
}

// ratioName returns the name of the ratio num over den in the phases given.
func ratioName(numPhase, num, denPhase, den string) string {
	return ratioDef{measure{numPhase, num}, measure{denPhase, den}}.Name()
}

// ratioDefs returns the ratios worth reading for the contenders measured:
// how far the limits are from bare and from each other, then every variant
// of ours against the floor, the limit and (when pipelined) the pipelined
// limit, its replays against the floor's, the limit's and the limit's first
// executions, and its storms against plain ours and against ours without
// collapse (the configuration before it).
func ratioDefs(names []string) []ratioDef {
	var defs []ratioDef
	add := func(np, n, dp, d string) {
		if slices.Contains(names, n) && slices.Contains(names, d) {
			defs = append(defs, ratioDef{measure{np, n}, measure{dp, d}})
		}
	}
	for _, n := range []string{Floor, Limit, Ours} {
		add(PhaseFirst, n, PhaseFirst, Bare)
	}
	add(PhaseFirst, Limit, PhaseFirst, Floor)
	add(PhaseFirst, LimitPipelined, PhaseFirst, Limit)
	for _, n := range names {
		if !isOurs(n) {
			continue
		}
		add(PhaseFirst, n, PhaseFirst, Floor)
		add(PhaseFirst, n, PhaseFirst, Limit)
		if s, _ := specOf(n); s.pipelined {
			add(PhaseFirst, n, PhaseFirst, LimitPipelined)
		}
	}
	for _, n := range names {
		if !isOurs(n) {
			continue
		}
		add(PhaseReplay, n, PhaseReplay, Floor)
		add(PhaseReplay, n, PhaseReplay, Limit)
		add(PhaseReplay, n, PhaseFirst, Limit)
	}
	for _, n := range names {
		if isOurs(n) && n != Ours {
			add(PhaseStorm, n, PhaseStorm, Ours)
		}
		if isOurs(n) && n != OursNoCollapse {
			add(PhaseStorm, n, PhaseStorm, OursNoCollapse)
		}
	}
	return defs
}

// value returns m's throughput in rd, and whether it was measured.
func (rd *Round) value(m measure) (Load, bool) {
	switch m.phase {
	case PhaseFirst:
		l, ok := rd.First[m.contender]
		return l, ok
	case PhaseReplay:
		l, ok := rd.Replay[m.contender]
		return l, ok
	case PhaseStorm:
		if s := rd.Storm[m.contender]; s != nil {
			return Load{RPS: s.RPS}, true
		}
	}
	return Load{}, false
}

// ratios fills rd's ratios from its measurements.
func (rd *Round) ratios(defs []ratioDef) {
	rd.Ratios, rd.CPURatios = map[string]float64{}, map[string]float64{}
	for _, d := range defs {
		n, ok1 := rd.value(d.num)
		m, ok2 := rd.value(d.den)
		if !ok1 || !ok2 {
			continue
		}
		rd.Ratios[d.Name()] = ratio(n.RPS, m.RPS)
		if d.num.phase != PhaseStorm && d.den.phase != PhaseStorm {
			rd.CPURatios[d.Name()] = cpuRatio(n, m)
		}
	}
}

// sortedRatioNames returns the names of m in ratioDefs' order, then any
// others sorted.
func sortedRatioNames(m map[string]float64, names []string) []string {
	var out []string
	for _, d := range ratioDefs(names) {
		if _, ok := m[d.Name()]; ok && !slices.Contains(out, d.Name()) {
			out = append(out, d.Name())
		}
	}
	var rest []string
	for k := range m {
		if !slices.Contains(out, k) {
			rest = append(rest, k)
		}
	}
	slices.SortFunc(rest, strings.Compare)
	return append(out, rest...)
}
