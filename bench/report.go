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
func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// names returns the contenders of m in the run's order (the first round's).
func (res *Results) names(m map[string]Load) []string {
	var out []string
	if len(res.Rounds) > 0 {
		for _, n := range res.Rounds[0].Order {
			if _, ok := m[n]; ok {
				out = append(out, n)
			}
		}
	}
	// The first round's order is rotated from the contenders list; put it
	// back in the list's order.
	slices.SortStableFunc(out, func(a, b string) int {
		return slices.Index(ContenderNames(), a) - slices.Index(ContenderNames(), b)
	})
	return out
}

// contenderDocs says what each contender is, for RESULTS.md.
var contenderDocs = map[string]string{
	Bare:           "the Gin handler alone, no idempotency",
	Floor:          "the least a Redis-backed layer can do: two raw EVALSHA of one-command scripts (`SET NX GET PX` claim, `SET PX` completion, loaded with SCRIPT LOAD), a 16-byte body hash for 422, no fencing, lease, scope or response capture",
	Limit:          "exactly our two Redis round trips: raw EVALSHA of `lua.Claim` and `lua.Complete` (loaded with SCRIPT LOAD), equivalent KEYS and ARGV, none of our Go-side work",
	LimitPipelined: "the limit with its EVALSHA sent through go-redis's auto-pipeliner (`rdb.AutoPipeline()`)",
	Ours:           "the handler behind `ginmw.New(store, ginmw.Options{Scope: ginmw.SharedScope(\"anonymous\")})` (the load generators present no credential), the store on a `*redis.Client`",
	OursPipelined:  "ours with the store on the client's auto-pipeliner: `redisstore.New(rdb.AutoPipeline())`",
	OursNoCollapse: "ours with `redisstore.Options{NoCollapse: true}`: every duplicate asks Redis, as before in-process collapse (the configuration the storm targets compare against)",
	OursCached:     "ours with `redisstore.Options{ReplayCacheBytes: 64 << 20}`: replays this process stored or fetched cost no round trip",
}

// WriteMarkdown renders every figure as the body of RESULTS.md.
func (res *Results) WriteMarkdown(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	e, c, m := res.Env, res.Config, res.Median
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
	if len(res.Targets) > 0 {
		p("## Targets\n\nGoals of open work, from medians of this run: reported, they do not fail the run. The plain path at the floor's cost comes first, then the pipelined store's lead and the storm's round trips.\n\n")
		p("| target | want | got | met |\n|---|---|---|---|\n")
		for _, t := range res.Targets {
			met := "yes"
			if !t.Pass {
				met = "not yet"
			}
			p("| %s | %s | %s | %s |\n", t.Name, t.Want, t.Got, met)
		}
		p("\n")
	}

	if len(res.Rounds) > 0 {
		p("## Contenders\n\nAll serve `POST /v1/payments` with the same handler, each with its own listener, go-redis client and keep-alive clients; they share one redis-server.\n\n")
		for _, n := range res.Rounds[0].Order {
			p("- **%s**: %s.\n", n, contenderDocs[n])
		}
		p("\n")
	}
	if len(res.Rounds) > 0 && len(res.Rounds[0].First) > 0 {
		p("## First execution (a fresh key per request)\n\n")
		res.loadTables(w, m.First, func(rd *Round) map[string]Load { return rd.First })
	}
	if len(res.Rounds) > 0 && len(res.Rounds[0].Replay) > 0 {
		p("## Replay (%d stored keys per contender, cycled over)\n\n", c.ReplayKeys)
		p("A replay is one EVALSHA that finds the completed record; a replay that runs the handler fails the run.\n\n")
		res.loadTables(w, m.Replay, func(rd *Round) map[string]Load { return rd.Replay })
	}
	if len(m.Ratios) > 0 {
		names := sortedRatioNames(m.Ratios, ContenderNames())
		p("## Ratios\n\nThroughput ratios within each round; \"by CPU\" is the same ratio from CPU per request (runner process + redis-server): ")
		p("the ratio a CPU-bound machine with nothing else running would show, steadier than req/s on a busy machine.\n\n")
		p("| ratio |")
		for i := range res.Rounds {
			p(" round %d |", i+1)
		}
		p(" **median** | median by CPU |\n|---|")
		for range res.Rounds {
			p("---|")
		}
		p("---|---|\n")
		for _, name := range names {
			p("| %s |", name)
			for _, rd := range res.Rounds {
				if v, ok := rd.Ratios[name]; ok {
					p(" %s |", f3(v))
				} else {
					p(" |")
				}
			}
			cpu := ""
			if v, ok := m.CPURatios[name]; ok {
				cpu = f3(v)
			}
			p(" **%s** | %s |\n", f3(m.Ratios[name]), cpu)
		}
		p("\n")
	}

	if len(res.Rounds) > 0 && len(res.Rounds[0].Storm) > 0 {
		p("## Retry storm (`storm`: %d keys x %d simultaneous duplicates, %d workers, 409 not retried)\n\n",
			c.StormKeys, c.StormDups, c.StormConcurrency)
		p("Executions are counted in the handler, per key: the ground truth. Bare has no idempotency: every duplicate runs. ")
		p("Round trips per key are the calls the contender's go-redis client made (a pipeline is one); requests per key are the top-level commands redis-server served (EVALSHA, batched or not); Redis commands per key are ")
		p("every command redis-server ran (`INFO commandstats` after `CONFIG RESETSTAT`): EVALSHA and the commands inside the scripts.\n\n")
		p("| contender | req/s (median) | p50 ms | p99 ms | round trips per key | requests per key | Redis commands per key | verdict per round | executions per round | max per key | divergent keys |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, n := range ContenderNames() {
			sm, ok := m.Storm[n]
			if !ok {
				continue
			}
			var verdicts, execs, maxes, div []string
			for _, rd := range res.Rounds {
				s := rd.Storm[n]
				verdicts = append(verdicts, s.Verdict)
				execs = append(execs, strconv.Itoa(s.HandlerExecutions))
				maxes = append(maxes, strconv.Itoa(s.ExecutionsMax))
				div = append(div, strconv.Itoa(s.DivergentKeys))
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", n, f0(sm.RPS), f2(sm.P50MS), f2(sm.P99MS), f2(sm.RoundTripsPerKey), f2(sm.ScriptsPerKey), f2(sm.CommandsPerKey),
				strings.Join(verdicts, ", "), strings.Join(execs, ", "), strings.Join(maxes, ", "), strings.Join(div, ", "))
		}
		p("\n")
		last := res.Rounds[len(res.Rounds)-1]
		for _, n := range ContenderNames() {
			if s := last.Storm[n]; s != nil && isOurs(n) {
				p("%s, last round: statuses %s; %d originals, %d replays, %d answered 409; Redis commands per key: %s.\n\n",
					n, statusList(s.Status), s.Originals, s.Replays, s.InProgress, commandsGot(s.Server))
			}
		}
	}
	if len(res.StormTwoInstances) > 0 || len(res.Cluster) > 0 {
		p("## Scale-out\n\n| storm | verdict | executions | max per key | divergent | p50 ms | p99 ms | req/s | round trips per key | Redis commands per key |\n|---|---|---|---|---|---|---|---|---|---|\n")
		row := func(name string, s *StormResult) {
			p("| %s | %s | %d | %d | %d | %s | %s | %s | %s | %s |\n", name, s.Verdict, s.HandlerExecutions, s.ExecutionsMax, s.DivergentKeys,
				f2(s.P50MS), f2(s.P99MS), f0(s.RPS), f2(s.RoundTripsPerKey), f2(s.Server.Total))
		}
		for _, s := range res.StormTwoInstances {
			row(s.Contender+" on two Gin instances, one Redis (round robin)", s)
		}
		for _, cl := range res.Cluster {
			row(fmt.Sprintf("%s on one instance, %d-master Redis Cluster (records per master %v)", cl.Storm.Contender, cl.Masters, cl.RecordsPerMaster), cl.Storm)
		}
		p("\nThe cluster runs use the same middleware and store on a `redis.ClusterClient`: no change of code. Their commands are summed over the masters.\n\n")
	}

	if len(res.Cost) > 0 {
		p("## Redis cost per request\n\n")
		p("Requests sent one at a time after `CONFIG RESETSTAT`. Round trips and commands sent are counted by a go-redis hook on the contender's client; ")
		p("the rest by the server (`INFO commandstats` deltas): top-level EVALSHA, EVAL and other commands, the commands the scripts ran, and all of them together.\n\n")
		p("| case | contender | requests | round trips (client) | commands sent (client) | EVALSHA | EVAL | other | in scripts | **commands in all** | by name |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, co := range res.Cost {
			var names []string
			for _, k := range slices.Sorted(maps.Keys(co.Server.ByName)) {
				names = append(names, fmt.Sprintf("%s %g", k, co.Server.ByName[k]))
			}
			s := co.Server
			p("| %s | %s | %d | %g | %g | %g | %g | %g | %g | **%g** | %s |\n", co.Case, co.Contender, co.Requests, co.RoundTrips, co.Sent,
				s.EvalSHA, s.Eval, s.Other, s.Script, s.Total, strings.Join(names, ", "))
		}
		p("\n")
	}
	if len(res.Allocs) > 0 {
		p("## Go allocations per request\n\n")
		p("Each contender's own handler and Redis client, served in process through `httptest` (no network), one request at a time, %d per case; ", res.Allocs[0].Runs)
		p("heap allocations counted by the runtime over the whole process, as `go test -benchmem` does (cross-check: `go -C bench test . -run '^$' -bench 'Gin/redis/' -benchmem`). ")
		p("They include Gin, the handler and go-redis: ours minus the limit or the floor is what our layer allocates.\n\n")
		p("| contender | first execution allocs | B | replay allocs | B |\n|---|---|---|---|---|\n")
		for _, n := range ContenderNames() {
			fa, ra := res.allocsOf(n, CaseFirst), res.allocsOf(n, CaseReplay)
			if fa == nil {
				continue
			}
			rc, rb := "", ""
			if ra != nil {
				rc, rb = f1(ra.PerOp), f0(ra.BytesOp)
			}
			p("| %s | %s | %s | %s | %s |\n", n, f1(fa.PerOp), f0(fa.BytesOp), rc, rb)
		}
		p("\n")
	}
	if len(res.Memory) > 0 {
		p("## Redis memory per completed record\n\n")
		p("`MEMORY USAGE <record> SAMPLES 0`: the record is one string. The stored response encodes the headers ")
		p("(Content-Type, Location) before the body. Allocator slack is jemalloc's rounding of the string's allocation to its size class.\n\n")
		p("| body B | record B | MEMORY USAGE B | overhead over body B | allocator slack B | fixed overhead B | encoding |\n|---|---|---|---|---|---|---|\n")
		for _, m := range res.Memory {
			p("| %d | %d | %d | %d | %d | %d | %s |\n", m.BodyBytes, m.StoredBytes, m.Usage, m.Overhead, m.Slack, m.Fixed, m.Encoding)
		}
		p("\n")
	}
	if pe := res.Peers; pe != nil {
		res.writePeers(w, pe)
	}
	if len(res.Notes) > 0 {
		p("## Notes\n\n")
		for _, n := range res.Notes {
			p("- %s\n", n)
		}
		p("\n")
	}
}

// loadTables writes a throughput phase: req/s round by round, then the
// medians per contender with CPU per request split into the runner process
// and redis-server.
func (res *Results) loadTables(w io.Writer, med map[string]Load, get func(*Round) map[string]Load) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	names := res.names(med)
	p("| round | order |")
	for _, n := range names {
		p(" %s req/s |", n)
	}
	p("\n|---|---|%s\n", strings.Repeat("---|", len(names)))
	for i := range res.Rounds {
		rd := &res.Rounds[i]
		p("| %d | %s |", i+1, strings.Join(rd.Order, ","))
		for _, n := range names {
			p(" %s |", f0(get(rd)[n].RPS))
		}
		p("\n")
	}
	p("| **median** | |")
	for _, n := range names {
		p(" **%s** |", f0(med[n].RPS))
	}
	p("\n\n")
	p("Medians per request. CPU: the runner process (the servers and the load generator, whose share is about the same for every contender, so differences between contenders are server work) and redis-server.\n\n")
	p("| contender | req/s | p50 ms | p99 ms | server CPU µs | Redis CPU µs | CPU in all µs |\n|---|---|---|---|---|---|---|\n")
	for _, n := range names {
		l := med[n]
		p("| %s | %s | %s | %s | %s | %s | %s |\n", n, f0(l.RPS), f2(l.P50MS), f2(l.P99MS), f1(l.CPUUS), f1(l.RedisCPUUS), f1(l.CPUUS+l.RedisCPUUS))
	}
	p("\n")
}

// writePeers writes the peers' section.
func (res *Results) writePeers(w io.Writer, pe *Peers) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Peers, side by side\n\n")
	p("Each library on its own framework, with and without idempotency, in the same run (ratios are medians of per-round ratios). ")
	p("Peer figures come from `%s`, run right after ours.\n\n", pe.Command)
	p("| library | overhead ratio (with / without) | replay req/s | storm: executions (max per key) | storm: divergent keys | two instances: executions (max per key) | two instances: divergent keys |\n|---|---|---|---|---|---|---|\n")
	if ratio, ok := res.Median.Ratios[ratioName(PhaseFirst, Ours, PhaseFirst, Bare)]; ok {
		last, two, div, div2 := "n/a", "n/a", "n/a", "n/a"
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
		for _, s := range res.StormTwoInstances {
			if s.Contender == Ours {
				two, div2 = fmt.Sprintf("%d (%d)", s.HandlerExecutions, s.ExecutionsMax), strconv.Itoa(s.DivergentKeys)
			}
		}
		p("| idemkey ginmw (Gin) | %s | %s | %s | %s | %s | %s |\n", f3(ratio), f0(res.Median.Replay[Ours].RPS), last, div, two, div2)
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

func statusList(m map[int]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// WriteText writes the human summary: headline figures, the checks and
// the targets.
func (res *Results) WriteText(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	m := res.Median
	p("idemkey storm-bench: %s, redis %s, %d cores, load %s -> %s, %s\n", res.Env.GoVersion, res.Env.RedisVersion,
		res.Env.NumCPU, res.Env.LoadBefore, res.Env.LoadAfter, res.Duration)
	for _, ph := range []struct {
		name string
		m    map[string]Load
	}{{"first execution", m.First}, {"replay", m.Replay}} {
		if len(ph.m) == 0 {
			continue
		}
		p("%s (medians: req/s, server + Redis CPU µs per request):", ph.name)
		for i, n := range res.names(ph.m) {
			if i > 0 {
				p(",")
			}
			l := ph.m[n]
			p(" %s %s (%s+%s)", n, f0(l.RPS), f1(l.CPUUS), f1(l.RedisCPUUS))
		}
		p("\n")
	}
	for _, name := range sortedRatioNames(m.Ratios, ContenderNames()) {
		p("  %-48s %s", name, f3(m.Ratios[name]))
		if v, ok := m.CPURatios[name]; ok {
			p("  (by CPU %s)", f3(v))
		}
		p("\n")
	}
	if len(m.Storm) > 0 {
		p("storm (medians: req/s, p99 ms, round trips and Redis commands per key):")
		for i, n := range ContenderNames() {
			s, ok := m.Storm[n]
			if !ok {
				continue
			}
			if i > 0 {
				p(",")
			}
			p(" %s %s %s %s %s", n, f0(s.RPS), f2(s.P99MS), f2(s.RoundTripsPerKey), f2(s.CommandsPerKey))
		}
		p("\n")
	}
	for _, co := range res.Cost {
		p("cost %-22s %-16s %g round trips, %g commands in all (%g EVALSHA, %g EVAL, %g other, %g in scripts)\n", co.Case+",", co.Contender,
			co.RoundTrips, co.Server.Total, co.Server.EvalSHA, co.Server.Eval, co.Server.Other, co.Server.Script)
	}
	for _, a := range res.Allocs {
		p("allocs %-16s %-16s %.1f allocs, %.0f B per request\n", a.Contender+",", a.Case, a.PerOp, a.BytesOp)
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
	if len(res.Targets) > 0 {
		p("targets (they do not fail the run):\n")
		for _, t := range res.Targets {
			mark := "met "
			if !t.Pass {
				mark = "not "
			}
			p("  %s %s: %s (want %s)\n", mark, t.Name, t.Got, t.Want)
		}
	}
	for _, n := range res.Notes {
		p("note: %s\n", n)
	}
}
