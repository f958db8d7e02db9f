package httpcore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/redisstore"
)

// TestLogLimitOncePerCausePerMinute: a line goes out once per cause within
// the minute; another cause has its own; a minute later the next line
// goes out with the count held back. Time is the test's.
func TestLogLimitOncePerCausePerMinute(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	var now time.Duration
	l := &logLimit{now: func() time.Duration { return now }}
	refused := fmt.Errorf("redisstore: claim: %w", syscall.ECONNREFUSED)
	for range 5 {
		l.log(logger, slog.LevelWarn, "idemkey: store unavailable", storeCause(refused), "err", refused)
	}
	l.log(logger, slog.LevelWarn, "idemkey: store unavailable", storeCause(context.DeadlineExceeded), "err", context.DeadlineExceeded)
	require.Equal(t, 2, strings.Count(buf.String(), "level=WARN"), buf.String())
	require.Contains(t, buf.String(), "cause=refused")
	require.Contains(t, buf.String(), "cause=timeout")

	now = logEvery - time.Nanosecond
	l.log(logger, slog.LevelWarn, "idemkey: store unavailable", "refused", "err", refused)
	require.Equal(t, 2, strings.Count(buf.String(), "level=WARN"))
	now = logEvery
	l.log(logger, slog.LevelWarn, "idemkey: store unavailable", "refused", "err", refused)
	require.Equal(t, 3, strings.Count(buf.String(), "level=WARN"))
	require.Contains(t, buf.String(), "more_since_last_logged=5")
}

func TestStoreCause(t *testing.T) {
	for err, want := range map[error]string{
		fmt.Errorf("x: %w", syscall.ECONNREFUSED):                "refused",
		fmt.Errorf("x: %w", context.DeadlineExceeded):            "timeout",
		fmt.Errorf("x: %w", redisstore.ErrEvicting):              "evicting",
		fmt.Errorf("x: %w", redisstore.ErrNoPersistence):         "no persistence",
		errors.New("READONLY You can't write against a replica"): "other",
	} {
		require.Equal(t, want, storeCause(err), "%v", err)
	}
}
