package bench

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
)

// NotesMarker separates RESULTS.md's generated part from the hand-written
// notes below it, which WriteResultsFile keeps when it rewrites the file.
const NotesMarker = "<!-- storm-bench: everything above is generated; notes below this line are kept on rewrite -->"

// WriteResultsFile renders res as Markdown into path, keeping the notes
// below NotesMarker of the file it replaces.
func WriteResultsFile(path string, res *Results) error {
	notes := ""
	old, err := os.ReadFile(path)
	switch {
	case err == nil:
		if _, after, ok := strings.Cut(string(old), NotesMarker); ok {
			notes = strings.TrimLeft(after, "\n")
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	var b strings.Builder
	res.WriteMarkdown(&b)
	b.WriteString("\n" + NotesMarker + "\n\n")
	b.WriteString(notes)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func yes(pass bool) string {
	if pass {
		return "yes"
	}
	return "**NO**"
}

func f3(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
func f0(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
func f2(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// WriteMarkdown renders every figure as the body of RESULTS.md.
func (res *Results) WriteMarkdown(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	e, c := res.Env, res.Config
	p("# idemkey benchmark results\n\n")
	p("Written by `%s` on %s (took %s). Every ratio compares contenders measured in the same run, in turn, ", e.Command, e.Date, res.Duration)
	p("round after round, with the order rotated each round; it is the median of the per-round ratios.\n\n")
	p("| machine | |\n|---|---|\n")
	p("| CPU | %s, %d cores, GOMAXPROCS %d |\n| memory | %s |\n| OS | %s |\n", e.CPU, e.NumCPU, e.GOMAXPROCS, e.Memory, e.Kernel)
	p("| Go | %s, gin %s, go-redis %s |\n| Redis | redis-server %s (private, loopback, no persistence) |\n", e.GoVersion, e.Gin, e.GoRedis, e.RedisVersion)
	p("| load average (1 min) | %s at start, %s at end |\n", e.LoadBefore, e.LoadAfter)
	p("| setup | %d rounds x %s per throughput phase, %d keep-alive clients; storm %d keys x %d dups at concurrency %d |\n\n",
		c.Rounds, c.Duration, c.Concurrency, c.StormKeys, c.StormDups, c.StormConcurrency)
	p("Servers (Gin, release mode, no logger), the load generator (`internal/loadgen`, closed loop) and redis-server share the machine; ")
	p("absolute req/s depend on it, the ratios much less.\n\n")

	p("## Checks\n\n| check | want | got | pass |\n|---|---|---|---|\n")
	for _, ch := range res.Checks {
		p("| %s | %s | %s | %s |\n", ch.Name, ch.Want, ch.Got, yes(ch.Pass))
	}
	p("\n")

	if len(res.Rounds) > 0 && len(res.Rounds[0].First) > 0 {
		m := res.Median
		p("## First execution (a fresh key per request)\n\n")
		p("- **limit**: the same Gin handler doing exactly the two Redis round trips of our first execution: raw EVALSHA of `lua.Claim` and `lua.Complete` (loaded once with SCRIPT LOAD), equivalent KEYS and ARGV, none of our Go-side work.\n")
		p("- **ours**: the handler behind `ginmw.New(store, ginmw.Options{Scope: ginmw.SharedScope(\"anonymous\")})` (the load generators present no credential).\n\n")
		p("| round | order | bare req/s | limit req/s | ours req/s | ours/limit | ours/bare | limit/bare |\n|---|---|---|---|---|---|---|---|\n")
		for i, rd := range res.Rounds {
			p("| %d | %s | %s | %s | %s | %s | %s | %s |\n", i+1, strings.Join(rd.Order, ","),
				f0(rd.First[Bare].RPS), f0(rd.First[Limit].RPS), f0(rd.First[Ours].RPS), f3(rd.FirstOursLimit), f3(rd.FirstOursBare), f3(rd.FirstLimitBare))
		}
		p("| **median** | | %s | %s | %s | **%s** | **%s** | %s |\n\n", f0(m.FirstRPS[Bare]), f0(m.FirstRPS[Limit]), f0(m.FirstRPS[Ours]),
			f3(m.FirstOursLimit), f3(m.FirstOursBare), f3(m.FirstLimitBare))
		p("CPU per request, medians (µs; runner process = servers + load generator, then redis-server): ")
		for i, n := range []string{Bare, Limit, Ours} {
			if i > 0 {
				p(", ")
			}
			p("%s %s + %s", n, strconv.FormatFloat(m.FirstCPUUS[n], 'f', 1, 64), strconv.FormatFloat(m.FirstRedisCPUUS[n], 'f', 1, 64))
		}
		p(". Ours costs **%s µs** more than the limit per first execution; ours/limit computed from CPU: **%s** ", strconv.FormatFloat(m.FirstExtraCPUUS, 'f', 1, 64), f3(m.FirstOursLimitCPU))
		p("(the throughput ratio a CPU-bound machine with nothing else running would show; it moves much less than req/s when the machine is busy).\n\n")
		p("Latency p50/p99 (ms), round by round: ")
		for i, rd := range res.Rounds {
			if i > 0 {
				p("; ")
			}
			p("bare %s/%s, limit %s/%s, ours %s/%s", f2(rd.First[Bare].P50MS), f2(rd.First[Bare].P99MS),
				f2(rd.First[Limit].P50MS), f2(rd.First[Limit].P99MS), f2(rd.First[Ours].P50MS), f2(rd.First[Ours].P99MS))
		}
		p(".\n\n")
	}

	if len(res.Rounds) > 0 && len(res.Rounds[0].Replay) > 0 {
		m := res.Median
		p("## Replay (%d stored keys, cycled over)\n\n", c.ReplayKeys)
		p("The limit's replay is one EVALSHA of claim.lua that finds the completed record; ours is `ginmw`'s replay. ")
		p("A replay is one round trip where a first execution is two, so ours should beat the limit's first executions.\n\n")
		p("| round | limit replay req/s | ours replay req/s | ours replay / limit replay | ours replay / limit first | ours replay / bare first |\n|---|---|---|---|---|---|\n")
		for i, rd := range res.Rounds {
			p("| %d | %s | %s | %s | %s | %s |\n", i+1, f0(rd.Replay[Limit].RPS), f0(rd.Replay[Ours].RPS),
				f3(rd.ReplayOursLimit), f3(rd.ReplayOursLimitFirst), f3(rd.ReplayOursBare))
		}
		p("| **median** | %s | %s | %s | **%s** | %s |\n\n", f0(m.ReplayRPS[Limit]), f0(m.ReplayRPS[Ours]),
			f3(m.ReplayOursLimit), f3(m.ReplayOursLimitFirst), f3(m.ReplayOursBare))
		p("CPU per replay, medians (µs, process + redis-server): limit %s + %s, ours %s + %s; ours costs %s µs more, ours/limit replay computed from CPU: %s.\n\n",
			strconv.FormatFloat(m.ReplayCPUUS[Limit], 'f', 1, 64), strconv.FormatFloat(m.ReplayRedisCPUUS[Limit], 'f', 1, 64),
			strconv.FormatFloat(m.ReplayCPUUS[Ours], 'f', 1, 64), strconv.FormatFloat(m.ReplayRedisCPUUS[Ours], 'f', 1, 64),
			strconv.FormatFloat(m.ReplayExtraCPUUS, 'f', 1, 64), f3(m.ReplayOursLimitCPU))
	}

	if len(res.Rounds) > 0 && len(res.Rounds[0].Storm) > 0 {
		m := res.Median
		p("## Retry storm (`internal/storm`: %d keys x %d simultaneous duplicates, %d workers, 409 not retried)\n\n",
			c.StormKeys, c.StormDups, c.StormConcurrency)
		p("Executions are counted in the handler, per key: the ground truth. Bare has no idempotency: every duplicate runs.\n\n")
		p("| contender | req/s (median) | p50 ms | p99 ms | verdict per round | executions per round | max per key | divergent keys |\n|---|---|---|---|---|---|---|---|\n")
		for _, n := range []string{Bare, Limit, Ours} {
			var verdicts, execs, maxes, div []string
			for _, rd := range res.Rounds {
				s := rd.Storm[n]
				verdicts = append(verdicts, s.Verdict)
				execs = append(execs, strconv.Itoa(s.HandlerExecutions))
				maxes = append(maxes, strconv.Itoa(s.ExecutionsMax))
				div = append(div, strconv.Itoa(s.DivergentKeys))
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", n, f0(m.StormRPS[n]), f2(m.StormP50MS[n]), f2(m.StormP99MS[n]),
				strings.Join(verdicts, ", "), strings.Join(execs, ", "), strings.Join(maxes, ", "), strings.Join(div, ", "))
		}
		p("\n")
		if s := res.Rounds[len(res.Rounds)-1].Storm[Ours]; s != nil {
			p("Ours, last round: statuses %s; %d originals, %d replays, %d answered 409.\n\n", statusList(s.Status), s.Originals, s.Replays, s.InProgress)
		}
	}
	if s := res.StormTwoInstances; s != nil || res.Cluster != nil {
		p("## Scale-out\n\n| storm of ours | verdict | executions | max per key | divergent | p50 ms | p99 ms | req/s |\n|---|---|---|---|---|---|---|---|\n")
		row := func(name string, s *StormResult) {
			p("| %s | %s | %d | %d | %d | %s | %s | %s |\n", name, s.Verdict, s.HandlerExecutions, s.ExecutionsMax, s.DivergentKeys, f2(s.P50MS), f2(s.P99MS), f0(s.RPS))
		}
		if s != nil {
			row("two Gin instances, one Redis (round robin)", s)
		}
		if cl := res.Cluster; cl != nil {
			row(fmt.Sprintf("one instance, %d-master Redis Cluster (records per master %v)", cl.Masters, cl.RecordsPerMaster), cl.Storm)
		}
		p("\nThe cluster run uses the same middleware and store on a `redis.ClusterClient`: no change of code.\n\n")
	}

	if len(res.Cost) > 0 {
		p("## Redis cost per request\n\n")
		p("Requests sent one at a time after `CONFIG RESETSTAT`; round trips counted by a go-redis hook (commands sent) and by the server ")
		p("(`INFO commandstats` deltas: EVALSHA + EVAL + other top-level commands); script commands are those the Lua scripts ran.\n\n")
		p("| case | contender | requests | round trips (client) | EVALSHA | EVAL | other | script commands | by name |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, co := range res.Cost {
			var names []string
			for _, k := range slices.Sorted(maps.Keys(co.Commands)) {
				names = append(names, fmt.Sprintf("%s %g", k, co.Commands[k]))
			}
			p("| %s | %s | %d | %g | %g | %g | %g | %g | %s |\n", co.Case, co.Contender, co.Requests, co.RoundTrips, co.EvalSHA, co.Eval,
				co.OtherTopLevel, co.ScriptCommands, strings.Join(names, ", "))
		}
		p("\n")
	}
	if len(res.Memory) > 0 {
		p("## Redis memory per completed record\n\n")
		p("`MEMORY USAGE <record> SAMPLES 0` (the lease key is deleted on completion). The stored response encodes the headers ")
		p("(Content-Type, Location) before the body. Allocator slack is jemalloc's rounding of the stored response's allocation to its size class.\n\n")
		p("| body B | stored response B | MEMORY USAGE B | overhead over body B | allocator slack B | fixed overhead B | encoding |\n|---|---|---|---|---|---|---|\n")
		for _, m := range res.Memory {
			p("| %d | %d | %d | %d | %d | %d | %s |\n", m.BodyBytes, m.StoredBytes, m.Usage, m.Overhead, m.Slack, m.Fixed, m.Encoding)
		}
		p("\n")
	}
	if pe := res.Peers; pe != nil {
		p("## Peers, side by side\n\n")
		p("Each library on its own framework, with and without idempotency, in the same run (ratios are medians of per-round ratios). ")
		p("Peer figures come from `%s`, run right after ours.\n\n", pe.Command)
		p("| library | overhead ratio (with / without) | replay req/s | storm: executions (max per key) | storm: divergent keys | two instances: executions (max per key) | two instances: divergent keys |\n|---|---|---|---|---|---|---|\n")
		if len(res.Rounds) > 0 && len(res.Rounds[0].First) > 0 {
			var last, two string = "n/a", "n/a"
			var div, div2 = "n/a", "n/a"
			if len(res.Rounds[0].Storm) > 0 {
				var execs []string
				d := 0
				for _, rd := range res.Rounds {
					s := rd.Storm[Ours]
					execs = append(execs, fmt.Sprintf("%d (%d)", s.HandlerExecutions, s.ExecutionsMax))
					d += s.DivergentKeys
				}
				last, div = strings.Join(execs, ", "), strconv.Itoa(d)
				if slices.Equal(execs, slices.Repeat(execs[:1], len(execs))) {
					last = fmt.Sprintf("%s in each of %d rounds", execs[0], len(execs))
				}
			}
			if s := res.StormTwoInstances; s != nil {
				two, div2 = fmt.Sprintf("%d (%d)", s.HandlerExecutions, s.ExecutionsMax), strconv.Itoa(s.DivergentKeys)
			}
			p("| idemkey ginmw (Gin) | %s | %s | %s | %s | %s | %s |\n", f3(res.Median.FirstOursBare), f0(res.Median.ReplayRPS[Ours]), last, div, two, div2)
		}
		two, div2 := "n/a", "n/a"
		if s := pe.StormTwoInstances; s != nil {
			two, div2 = fmt.Sprintf("%d (%d)", s.HandlerExecutions, s.ExecutionsMax), strconv.Itoa(s.DivergentKeys)
		}
		p("| %s %s (fiber, storage %s %s) | %s | %s | %d (%d) | %d | %s | %s |\n\n", pe.Library, pe.FiberVersion, pe.StorageModule, pe.StorageVersion,
			f3(pe.FirstOverheadRatioMedian), f0(pe.ReplayRPS), pe.Storm.HandlerExecutions, pe.Storm.ExecutionsMax, pe.Storm.DivergentKeys, two, div2)
		p("Fiber: bare %s req/s, with idempotency %s req/s (medians); storm p50/p99 %s/%s ms, %d answered 409.\n\n",
			f0(pe.FirstRPSBareMedian), f0(pe.FirstRPSIdemMedian), f2(pe.Storm.P50MS), f2(pe.Storm.P99MS), pe.Storm.InProgress)
		for _, n := range pe.Notes {
			p("- %s\n", n)
		}
		p("\n")
	}
	if len(res.Notes) > 0 {
		p("## Notes\n\n")
		for _, n := range res.Notes {
			p("- %s\n", n)
		}
		p("\n")
	}
}

func statusList(m map[int]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// WriteText writes the human summary: headline figures and the checks.
func (res *Results) WriteText(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	m := res.Median
	p("idemkey storm-bench: %s, redis %s, %d cores, load %s -> %s, %s\n", res.Env.GoVersion, res.Env.RedisVersion,
		res.Env.NumCPU, res.Env.LoadBefore, res.Env.LoadAfter, res.Duration)
	if m.FirstRPS != nil {
		p("first execution (median req/s): bare %s, limit %s, ours %s; ours/limit %s, ours/bare %s, limit/bare %s\n",
			f0(m.FirstRPS[Bare]), f0(m.FirstRPS[Limit]), f0(m.FirstRPS[Ours]), f3(m.FirstOursLimit), f3(m.FirstOursBare), f3(m.FirstLimitBare))
		p("first execution CPU/request (median µs, process+redis): limit %.1f+%.1f, ours %.1f+%.1f; ours +%.1f µs, ours/limit by CPU %s\n",
			m.FirstCPUUS[Limit], m.FirstRedisCPUUS[Limit], m.FirstCPUUS[Ours], m.FirstRedisCPUUS[Ours], m.FirstExtraCPUUS, f3(m.FirstOursLimitCPU))
	}
	if m.ReplayRPS != nil {
		p("replay (median req/s): limit %s, ours %s; ours/limit replay %s, ours replay/limit first %s\n",
			f0(m.ReplayRPS[Limit]), f0(m.ReplayRPS[Ours]), f3(m.ReplayOursLimit), f3(m.ReplayOursLimitFirst))
	}
	if m.StormP99MS != nil {
		p("storm p50/p99 ms (median): bare %s/%s, limit %s/%s, ours %s/%s\n", f2(m.StormP50MS[Bare]), f2(m.StormP99MS[Bare]),
			f2(m.StormP50MS[Limit]), f2(m.StormP99MS[Limit]), f2(m.StormP50MS[Ours]), f2(m.StormP99MS[Ours]))
	}
	for _, co := range res.Cost {
		p("cost %-22s %-5s %g round trips (%g EVALSHA, %g EVAL, %g other), %g script commands\n", co.Case+",", co.Contender,
			co.RoundTrips, co.EvalSHA, co.Eval, co.OtherTopLevel, co.ScriptCommands)
	}
	for _, mm := range res.Memory {
		p("memory: body %d B -> record %d B (overhead %d B = %d B fixed + %d B allocator slack)\n", mm.BodyBytes, mm.Usage, mm.Overhead, mm.Fixed, mm.Slack)
	}
	if pe := res.Peers; pe != nil {
		p("peers: %s %s: overhead ratio %s, storm %d executions (max %d per key), %d divergent",
			pe.Library, pe.FiberVersion, f3(pe.FirstOverheadRatioMedian), pe.Storm.HandlerExecutions, pe.Storm.ExecutionsMax, pe.Storm.DivergentKeys)
		if s := pe.StormTwoInstances; s != nil {
			p("; two instances %d executions (max %d per key), %d divergent", s.HandlerExecutions, s.ExecutionsMax, s.DivergentKeys)
		}
		p("\n")
	}
	p("\nchecks:\n")
	for _, ch := range res.Checks {
		mark := "ok  "
		if !ch.Pass {
			mark = "FAIL"
		}
		p("  %s %s: %s (want %s)\n", mark, ch.Name, ch.Got, ch.Want)
	}
	for _, n := range res.Notes {
		p("note: %s\n", n)
	}
}
