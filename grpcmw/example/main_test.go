package main

import (
	"github.com/idemkey/idemkey/internal/syncbuf"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRun(t *testing.T) {
	var out strings.Builder
	require.NoError(t, run(&out, "", 3))
	s := out.String()
	require.Contains(t, s, "3 payments, 3 provider charges, 3 answers lost and replayed")
	require.Regexp(t, regexp.MustCompile(`payment 1: ch_\S+ amount 1000, replayed true`), s)
	require.Contains(t, s, `declined: FailedPrecondition "card declined: amount over the limit"; its retry: FailedPrecondition, replayed true`)
	require.Contains(t, s, "the same key for another amount: FailedPrecondition (KEY_REUSED)")
}

// On the embedded miniredis the example logs nothing: the store does not
// check it (Options.NoStartupCheck), which would warn that it persists
// nothing.
func TestRunLogsNothingOnMiniredis(t *testing.T) {
	var logs lockedBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	var out strings.Builder
	require.NoError(t, run(&out, "", 2))
	require.Contains(t, out.String(), "2 payments, 2 provider charges")
	require.Empty(t, logs.String())
}

// A Redis URL that does not parse is never echoed: url.Parse quotes it
// whole, password included.
func TestOpenRedisHidesThePassword(t *testing.T) {
	for _, url := range []string{"redis://app:s3cret@127.0.0.1:notaport/0", "redis://app:s3cr%zzet@127.0.0.1:1/0"} {
		_, _, _, err := openRedis(url)
		require.ErrorContains(t, err, "redis URL", url)
		require.NotContains(t, err.Error(), "s3cr", url)
	}
}

type lockedBuffer = syncbuf.Buffer
