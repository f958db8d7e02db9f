package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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
	cfg.Command = "go test ./bench -run TestRunnerQuick"
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
	for _, name := range []string{CaseReplay, CaseMismatch} {
		c := res.costOf(Ours, name)
		require.Equal(t, 1.0, c.RoundTrips, name)
		require.Equal(t, 1.0, c.EvalSHA, name)
	}
	require.Zero(t, res.costOf(Ours, CaseInProgress).RoundTrips, "the instance that runs the key answers its 409s itself")
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

func TestDecodePeers(t *testing.T) {
	p, err := decodePeers([]byte(`{"library":"github.com/gofiber/fiber/v3/middleware/idempotency","fiber_version":"v3.1.0",
		"first_overhead_ratio_median":0.41,"replay_rps":30000,
		"storm":{"instances":1,"keys":2000,"handler_executions":2000,"executions_max":1,"divergent_keys":0,"verdict":"pass"},
		"storm_two_instances":{"instances":2,"keys":2000,"handler_executions":2950,"executions_max":2,"divergent_keys":700,"verdict":"fail"},
		"notes":["n"]}`))
	require.NoError(t, err)
	require.Equal(t, 0.41, p.FirstOverheadRatioMedian)
	require.Equal(t, 2, p.StormTwoInstances.ExecutionsMax)
	require.Equal(t, 700, p.StormTwoInstances.DivergentKeys)
	_, err = decodePeers([]byte(`{}`))
	require.Error(t, err)
	require.Equal(t, []string{"-json", "-rounds", "5", "-duration", "1.5s", "-concurrency", "64", "-replay-keys", "1000",
		"-keys", "2000", "-dups", "10", "-storm-concurrency", "128"}, peersArgs(DefaultConfig()))
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
