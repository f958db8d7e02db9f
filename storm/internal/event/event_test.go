//go:build unix

package event

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseReadsTheFlagsSyntax(t *testing.T) {
	c, err := Parse("20s=redis-cli -p 6379 DEBUG SLEEP 5")
	require.NoError(t, err)
	require.Equal(t, Command{At: 20 * time.Second, Command: "redis-cli -p 6379 DEBUG SLEEP 5"}, c)
	require.Equal(t, "20s=redis-cli -p 6379 DEBUG SLEEP 5", c.String())
	c, err = Parse(" 1m30s = curl -X POST 'http://127.0.0.1:9000/flags?a=b' ")
	require.NoError(t, err)
	require.Equal(t, Command{At: 90 * time.Second, Command: "curl -X POST 'http://127.0.0.1:9000/flags?a=b'"}, c, "the first = splits")

	for _, tc := range []struct{ in, want string }{
		{"redis-cli DEBUG SLEEP 5", "want D=COMMAND"},
		{"20=kill 1", "not a duration"},
		{"-1s=true", "must not be negative"},
		{"5s=  ", "the command is empty"},
	} {
		_, err := Parse(tc.in)
		require.ErrorContains(t, err, tc.want, tc.in)
		require.ErrorContains(t, err, "--at", tc.in)
	}
}

func TestRunnerRunsEachCommandAtItsTimeAndRecordsHowItEnded(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var ended []string
	start := time.Now()
	r := Start(start, []Command{
		{At: 100 * time.Millisecond, Command: "echo out; echo err >&2; exit 3"},
		{At: 0, Command: "pwd"},
		{At: 50 * time.Millisecond, Command: "/no/such/program"},
	}, Options{Dir: dir, OnEnd: func(res Result) {
		mu.Lock()
		defer mu.Unlock()
		ended = append(ended, res.Command.Command)
	}})
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ended) == 3
	}, 30*time.Second, 5*time.Millisecond)
	results := r.Stop(context.Background())
	require.Len(t, results, 3)

	pwd, missing, exit3 := results[0], results[1], results[2]
	require.Equal(t, "pwd", pwd.Command.Command, "ordered by time")
	real, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	require.Equal(t, real+"\n", pwd.Output)
	require.Zero(t, pwd.ExitCode)
	require.Empty(t, pwd.Err)

	require.True(t, missing.Ran, "the shell ran, and said the program was not found")
	require.Equal(t, 127, missing.ExitCode)

	require.True(t, exit3.Ran)
	require.Equal(t, 3, exit3.ExitCode)
	require.Equal(t, "exit status 3", exit3.Err)
	require.Equal(t, "out\nerr\n", exit3.Output)
	for _, res := range results {
		require.GreaterOrEqual(t, res.Started, res.At, "%s: never before its time", res.Command)
		// The command starts within 50 ms of its time; 200 ms is that
		// bound with the 4x margin a bound that is the behaviour gets.
		require.Less(t, res.Started-res.At, 200*time.Millisecond, "%s: started %s after its time", res.Command, res.Started-res.At)
		require.Positive(t, res.Duration)
	}
}

func TestRunnerStopSkipsWhatIsToComeAndKillsWhatRuns(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "started")
	r := Start(time.Now(), []Command{
		// A command that starts another in the background: both end.
		{At: 0, Command: "sleep 60 & echo started > " + marker + "; sleep 60; wait"},
		{At: time.Hour, Command: "touch never"},
	}, Options{})
	require.Eventually(t, func() bool {
		_, err := os.Stat(marker)
		return err == nil
	}, 30*time.Second, 5*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no grace: kill at once
	results := r.Stop(ctx)
	require.True(t, results[0].Ran)
	require.Equal(t, -1, results[0].ExitCode)
	require.Equal(t, "killed: the run ended", results[0].Err)
	require.False(t, results[1].Ran)
	require.Equal(t, "not run: the run ended first", results[1].Err)
	require.Equal(t, results, r.Stop(context.Background()), "Stop twice")
}

func TestRunnerStopWaitsForARunningCommandWithinItsGrace(t *testing.T) {
	r := Start(time.Now(), []Command{{At: 0, Command: "sleep 0.2; echo done"}}, Options{})
	require.Eventually(t, func() bool { return r.Results()[0].Ran }, 30*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res := r.Stop(ctx)[0]
	require.Zero(t, res.ExitCode)
	require.Equal(t, "done\n", res.Output)
	require.GreaterOrEqual(t, res.Duration, 200*time.Millisecond)
}

func TestRunnerKeepsTheEndOfALongOutput(t *testing.T) {
	r := Start(time.Now(), []Command{{Command: "i=0; while [ $i -lt 2000 ]; do echo line $i; i=$((i+1)); done"}}, Options{OutputLimit: 100})
	require.Eventually(t, func() bool { return r.Results()[0].Duration > 0 }, 30*time.Second, time.Millisecond)
	out := r.Stop(context.Background())[0].Output
	require.Len(t, out, 100)
	require.True(t, strings.HasSuffix(out, "line 1999\n"))

	tl := &tail{limit: 4}
	for _, s := range []string{"ab", "cd", "e", "fghij", "k"} {
		_, _ = tl.Write([]byte(s))
	}
	require.Equal(t, "hijk", tl.String())
}
