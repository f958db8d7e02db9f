package main

import (
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/syncbuf"
)

// Every email is sent once, however many attempts the agent made; the
// count of emails is the mail server's own, not the answers'.
func TestRunSendsEachEmailOnce(t *testing.T) {
	var out strings.Builder
	require.NoError(t, run(&out, "", 3))
	s := out.String()
	require.Regexp(t, regexp.MustCompile(`3 send_email calls, \d+ attempts, 3 emails sent`), s)
	require.Regexp(t, regexp.MustCompile(`email 1: msg_\S+ after \d+ attempts`), s)
	require.Contains(t, s, "the server advertises tools.idempotency: the key goes in params._meta.idempotencyKey")
	require.Contains(t, s, "a call without a key: refused (KEY_MISSING)")
}

// On the embedded miniredis the example logs nothing.
func TestRunLogsNothingOnMiniredis(t *testing.T) {
	var logs syncbuf.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	var out strings.Builder
	require.NoError(t, run(&out, "", 1))
	require.Contains(t, out.String(), "1 send_email calls")
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
