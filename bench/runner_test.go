package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/bench/peers"
	"github.com/idemkey/idemkey/internal/redistest"
)

// TestRunnerQuick runs the scenario runner in quick mode, every contender,
// and checks what the harness must show whatever the machine: the round
// trips and commands counted on the server, the floor's and the limits'
// shape, the pipelined contenders' batching, exactly-once under the storms
// (single node, two instances, cluster) for ours and ours-pipelined, the
// allocations counted, fixed memory overhead. Throughput ratios are not
// asserted here: CI machines are too noisy for that.
func TestRunnerQuick(t *testing.T) {
	redistest.Binary(t) // skip, or fail with IDEMKEY_REQUIRE_REDIS=1, without redis-server
	cfg := QuickConfig()
	cfg.Command = "go -C bench test . -run TestRunnerQuick"
	cfg.Log = testLog{t}
	res, err := Run(t.Context(), cfg)
	require.NoError(t, err)

	for _, name := range []string{CaseFirst, CaseReplay, CaseInProgress, CaseMismatch, CaseDoFirst, CaseDoReplay} {
		c := res.Check(CheckRoundTrips + ", " + name)
		require.NotNil(t, c, name)
		require.True(t, c.Pass, "%s: %s", c.Name, c.Got)
		require.NotNil(t, res.Check(CheckCommands+", "+name), name)
	}
	first := res.costOf(Ours, CaseFirst)
	require.Equal(t, 2.0, first.RoundTrips)
	require.Equal(t, 2.0, first.Server.EvalSHA)
	require.LessOrEqual(t, first.Server.Total, 6.0, "at most 6 commands per first execution")
	require.Zero(t, res.costOf(Ours, CaseInProgress).RoundTrips, "the instance that runs the key answers its 409s itself")
	for _, name := range []string{CaseReplay, CaseMismatch} {
		c := res.costOf(Ours, name)
		require.Equal(t, 1.0, c.RoundTrips, name)
		require.Equal(t, 1.0, c.Server.EvalSHA, name)
	}
	for _, name := range []string{CaseFirst, CaseReplay, CaseMismatch, CaseDoFirst, CaseDoReplay} {
		c := res.Check(CheckCommands + ", " + name)
		require.True(t, c.Pass, "%s: %s", c.Name, c.Got)
	}
	require.Equal(t, map[int]int{409: cfg.CostRequests}, res.costOf(Ours, CaseInProgress).Status)
	require.Equal(t, map[int]int{422: cfg.CostRequests}, res.costOf(Ours, CaseMismatch).Status)
	// The limit does the same Redis work as ours, pipelined or not; the
	// floor two EVALSHA of one SET each, a replay one.
	for _, n := range []string{Limit, LimitPipelined, OursPipelined} {
		require.Equal(t, first.Server.ByName, res.costOf(n, CaseFirst).Server.ByName, n)
		require.Equal(t, 2.0, res.costOf(n, CaseFirst).Server.EvalSHA, n)
	}
	floorFirst, floorReplay := res.costOf(Floor, CaseFirst), res.costOf(Floor, CaseReplay)
	require.Equal(t, Commands{EvalSHA: 2, Script: 2, Total: 4, ByName: map[string]float64{"set": 2}}, floorFirst.Server)
	require.Equal(t, Commands{EvalSHA: 1, Script: 1, Total: 2, ByName: map[string]float64{"set": 1}}, floorReplay.Server)
	require.Equal(t, 2.0, floorFirst.RoundTrips)

	for _, name := range []string{CheckStorm, CheckStormTwo, CheckStormCluster, CheckMemoryFixed,
		CheckStorm + ", " + OursPipelined, CheckStormTwo + ", " + OursPipelined, CheckStormCluster + ", " + OursPipelined} {
		c := res.Check(name)
		require.NotNil(t, c, name)
		require.True(t, c.Pass, "%s: %s", c.Name, c.Got)
	}
	rd := res.Rounds[0]
	s := rd.Storm[Ours]
	require.Equal(t, cfg.StormKeys, s.HandlerExecutions)
	require.Equal(t, cfg.StormKeys*cfg.StormDups, s.Requests)
	require.Positive(t, s.Server.Total)
	require.GreaterOrEqual(t, s.Server.Total, s.Server.EvalSHA)
	require.Positive(t, s.RoundTripsPerKey)
	for _, n := range []string{Floor, Limit, LimitPipelined, OursPipelined} {
		require.True(t, rd.Storm[n].ExactlyOnce(), "%s is idempotent too", n)
	}
	require.Greater(t, rd.Storm[Bare].ExecutionsMax, 1, "without idempotency duplicates run")
	require.Zero(t, rd.Storm[Bare].Server.Total, "bare sends Redis nothing")
	// At concurrency 64 the pipeliner batches: fewer round trips than
	// commands sent.
	require.Less(t, rd.Storm[OursPipelined].RoundTripsPerKey, rd.Storm[OursPipelined].Server.TopLevel())
	require.Len(t, res.Cluster, 4) // one per variant of ours
	for _, cl := range res.Cluster {
		require.Len(t, cl.RecordsPerMaster, 3)
		for _, n := range cl.RecordsPerMaster {
			require.Positive(t, n, "every master holds records")
		}
	}
	for _, name := range []string{
		ratioName(PhaseFirst, Ours, PhaseFirst, Floor), ratioName(PhaseFirst, Ours, PhaseFirst, Limit),
		ratioName(PhaseFirst, Ours, PhaseFirst, Bare), ratioName(PhaseReplay, Ours, PhaseReplay, Floor),
		ratioName(PhaseReplay, Ours, PhaseFirst, Limit), ratioName(PhaseFirst, OursPipelined, PhaseFirst, LimitPipelined),
		ratioName(PhaseStorm, OursPipelined, PhaseStorm, Ours),
	} {
		require.Positive(t, res.Median.Ratios[name], name)
	}
	for _, n := range ContenderNames() {
		require.Positive(t, res.Median.First[n].CPUUS, n)
		if n != Bare {
			require.Positive(t, res.Median.First[n].RedisCPUUS, n)
		}
	}
	for _, n := range ContenderNames() {
		for _, cs := range []string{CaseFirst, CaseReplay} {
			if n == Bare && cs == CaseReplay {
				continue
			}
			a := res.allocsOf(n, cs)
			require.NotNil(t, a, "%s, %s", n, cs)
			require.Positive(t, a.PerOp, "%s, %s", n, cs)
			require.Equal(t, cfg.AllocRuns, a.Runs)
		}
	}
	for _, name := range []string{TargetFirstFloor, TargetReplayFloor, TargetServerCPU, TargetRedisCPU, TargetAllocs, TargetAllocsReplay,
		TargetPipelinedLimit, TargetPipelinedLimitP, TargetReplayBest, TargetStormCommands, TargetStormSpeedup} {
		require.True(t, slices.ContainsFunc(res.Targets, func(c Check) bool { return c.Name == name }), name)
	}

	// RESULTS.md keeps hand-written notes across rewrites.
	path := filepath.Join(t.TempDir(), "RESULTS.md")
	require.NoError(t, os.WriteFile(path, []byte("old\n"+NotesMarker+"\n\nkept notes\n"), 0o644))
	require.NoError(t, WriteResultsFile(path, res))
	out, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotContains(t, string(out), "old\n")
	require.Contains(t, string(out), "kept notes")
	require.Contains(t, string(out), "| round trips, first execution |")
	require.Contains(t, string(out), "| first: ours / floor |")
	var text strings.Builder
	res.WriteText(&text)
	require.Contains(t, text.String(), "ok   storm, cluster")
}

func TestConfigContenders(t *testing.T) {
	cfg := QuickConfig()
	require.NoError(t, cfg.validate())
	require.Equal(t, ContenderNames(), cfg.contenders())
	cfg.Contenders = []string{Floor, Ours}
	require.NoError(t, cfg.validate())
	cfg.Contenders = []string{Floor, Limit}
	require.ErrorContains(t, cfg.validate(), `must include "ours"`)
	cfg.Contenders = []string{Ours, "nope"}
	require.ErrorContains(t, cfg.validate(), `unknown contender "nope"`)
	cfg.Contenders = []string{Ours, Ours}
	require.ErrorContains(t, cfg.validate(), "named twice")
}

func TestRatioDefs(t *testing.T) {
	var names []string
	for _, d := range ratioDefs(ContenderNames()) {
		names = append(names, d.Name())
	}
	for _, want := range []string{"first: ours / floor", "first: ours / limit", "replay: ours / floor", "replay: ours / limit first",
		"first: ours-pipelined / limit-pipelined", "first: limit-pipelined / limit", "storm: ours-pipelined / ours"} {
		require.Contains(t, names, want)
	}
	// Only ratios of contenders measured.
	for _, d := range ratioDefs([]string{Floor, Ours}) {
		require.Subset(t, []string{Floor, Ours}, []string{d.num.contender, d.den.contender})
	}
}

// TestDecodePeers reads what cmd/peers prints (peers.Results encoded as its
// main does) back into the runner's Peers: one type on both sides.
func TestDecodePeers(t *testing.T) {
	want := peers.Results{Library: "github.com/gofiber/fiber/v3/middleware/idempotency", FiberVersion: "v3.1.0",
		FirstOverheadRatioMedian: 0.41, ReplayRPS: 30000,
		Storm:             &peers.Storm{Instances: 1, Keys: 2000, HandlerExecutions: 2000, ExecutionsMax: 1, Verdict: "pass"},
		StormTwoInstances: &peers.Storm{Instances: 2, Keys: 2000, HandlerExecutions: 2950, ExecutionsMax: 2, DivergentKeys: 700, Verdict: "fail"},
		Notes:             []string{"n"}}
	b, err := json.MarshalIndent(want, "", "  ")
	require.NoError(t, err)
	p, err := decodePeers(b)
	require.NoError(t, err)
	require.Equal(t, want, p.Results)
	_, err = decodePeers([]byte(`{}`))
	require.Error(t, err)
	require.Equal(t, []string{"-json", "-rounds", "5", "-duration", "1.5s", "-concurrency", "64", "-replay-keys", "1000",
		"-keys", "2000", "-dups", "10", "-storm-concurrency", "128"}, peersArgs(DefaultConfig()))

	// Embedded in the runner's results, the peer's fields sit beside the
	// command that made them.
	b, err = json.Marshal(&Peers{Command: "c", Results: want})
	require.NoError(t, err)
	var flat map[string]any
	require.NoError(t, json.Unmarshal(b, &flat))
	require.Equal(t, "c", flat["command"])
	require.Equal(t, 0.41, flat["first_overhead_ratio_median"])
}

func TestFindModule(t *testing.T) {
	dir, err := FindModule()
	require.NoError(t, err)
	require.True(t, isModule(dir))
	root := filepath.Dir(dir)
	require.False(t, isModule(root), "the repository's root is idemkey's module")
	t.Chdir(root)
	got, err := FindModule()
	require.NoError(t, err)
	require.Equal(t, dir, got, "found from the repository's root too")
	t.Chdir(filepath.Join(dir, "peers"))
	got, err = FindModule()
	require.NoError(t, err)
	require.Equal(t, dir, got, "found from below")
}

func TestRecordKey(t *testing.T) {
	k := recordKey("idem:", "anonymous", "k")
	require.True(t, strings.HasPrefix(k, "idem:{") && strings.HasSuffix(k, "}"), k)
	require.Len(t, k, len("idem:{}")+22)
	require.NotEqual(t, k, recordKey("idem:", "anonymous", "l"))
	require.NotEqual(t, k, recordKey("idem:", "anonymou", "sk"), "the scope's length is part of the hash")
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
