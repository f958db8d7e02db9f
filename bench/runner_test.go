package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/bench/peers"
	"github.com/idemkey/idemkey/internal/redistest"
)

// TestRunnerQuick runs the scenario runner in quick mode and checks what the
// harness must show whatever the machine: the round trips counted on the
// server, exactly-once under the storms (single node, two instances,
// cluster), fixed memory overhead. Throughput ratios are not asserted here:
// CI machines are too noisy, and -race changes them.
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
	}
	first := res.costOf(Ours, CaseFirst)
	require.Equal(t, 2.0, first.RoundTrips)
	require.Equal(t, 2.0, first.EvalSHA)
	for _, name := range []string{CaseReplay, CaseInProgress, CaseMismatch} {
		c := res.costOf(Ours, name)
		require.Equal(t, 1.0, c.RoundTrips, name)
		require.Equal(t, 1.0, c.EvalSHA, name)
	}
	require.Equal(t, map[int]int{409: cfg.CostRequests}, res.costOf(Ours, CaseInProgress).Status)
	require.Equal(t, map[int]int{422: cfg.CostRequests}, res.costOf(Ours, CaseMismatch).Status)
	// The limit does the same Redis work as ours.
	require.Equal(t, first.Commands, res.costOf(Limit, CaseFirst).Commands)

	for _, name := range []string{CheckStorm, CheckStormTwo, CheckStormCluster, CheckMemoryFixed} {
		c := res.Check(name)
		require.NotNil(t, c, name)
		require.True(t, c.Pass, "%s: %s", c.Name, c.Got)
	}
	s := res.Rounds[0].Storm[Ours]
	require.Equal(t, cfg.StormKeys, s.HandlerExecutions)
	require.Equal(t, cfg.StormKeys*cfg.StormDups, s.Requests)
	require.True(t, res.Rounds[0].Storm[Limit].ExactlyOnce(), "the limit handler is idempotent too")
	require.Greater(t, res.Rounds[0].Storm[Bare].ExecutionsMax, 1, "without idempotency duplicates run")
	require.Len(t, res.Cluster.RecordsPerMaster, 3)
	for _, n := range res.Cluster.RecordsPerMaster {
		require.Positive(t, n, "every master holds records")
	}
	for _, f := range []float64{res.Median.FirstOursLimit, res.Median.FirstOursBare, res.Median.ReplayOursLimit} {
		require.Positive(t, f)
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
	var text strings.Builder
	res.WriteText(&text)
	require.Contains(t, text.String(), "ok   storm, cluster")
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

func TestJemallocSize(t *testing.T) {
	for n, want := range map[int]int{1: 8, 9: 16, 100: 112, 128: 128, 129: 160, 1000: 1024, 1091: 1280, 16451: 20480, 4097: 5120} {
		require.Equal(t, want, jemallocSize(n), "n=%d", n)
	}
}

func TestRecordKeys(t *testing.T) {
	k := recordKeys("idem:", "anonymous", "k")
	require.True(t, strings.HasPrefix(k[0], "idem:{") && strings.HasSuffix(k[0], "}"), k[0])
	require.Equal(t, k[0]+":lease", k[1])
	require.Len(t, k[0], len("idem:{}")+22)
	require.NotEqual(t, k, recordKeys("idem:", "anonymous", "l"))
	require.NotEqual(t, k, recordKeys("idem:", "anonymou", "sk"), "the scope's length is part of the hash")
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
