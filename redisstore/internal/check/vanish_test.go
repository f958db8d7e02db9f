package check

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

// TestDiagnose: a master restarted since the owner's last sign of life
// comes first (surely, by its uptime in whole seconds, or, within the
// second, by a run_id other than the one known), then eviction on an
// evicting policy, else a deletion.
func TestDiagnose(t *testing.T) {
	info := func(up, policy, evicted, runID string) map[string]string {
		return map[string]string{"uptime_in_seconds": up, "maxmemory_policy": policy, "evicted_keys": evicted, "run_id": runID}
	}
	one := func(i map[string]string) map[string]map[string]string { return map[string]map[string]string{"a": i} }
	for _, tt := range []struct {
		name  string
		infos map[string]map[string]string
		known map[string]string
		since time.Duration
		want  Cause
	}{
		{"not asked", nil, nil, time.Second, Unknown},
		{"restarted: up 2s, the sign 3.5s ago", one(info("2", "noeviction", "0", "r2")), nil, 3500 * time.Millisecond, Restarted},
		{"restarted within the second: another run_id", one(info("0", "noeviction", "0", "r2")), map[string]string{"a": "r1"}, 300 * time.Millisecond, Restarted},
		{"within the second, the same run_id: not restarted", one(info("0", "noeviction", "0", "r1")), map[string]string{"a": "r1"}, 300 * time.Millisecond, Deleted},
		{"within the second, no run_id known: not restarted", one(info("0", "noeviction", "0", "r1")), nil, 300 * time.Millisecond, Deleted},
		{"restarted, one master of two", map[string]map[string]string{"a": info("9000", "noeviction", "0", "ra"), "b": info("2", "noeviction", "0", "rb")}, nil, 4 * time.Second, Restarted},
		{"up longer than the run: not restarted", one(info("10", "noeviction", "0", "r1")), map[string]string{"a": "r0"}, 3 * time.Second, Deleted},
		{"evicted", one(info("9000", "allkeys-lru", "12", "r1")), nil, time.Second, Evicted},
		{"an evicting policy that evicted nothing", one(info("9000", "allkeys-lru", "0", "r1")), nil, time.Second, Deleted},
		{"evicted keys under noeviction (policy changed since)", one(info("9000", "noeviction", "5", "r1")), nil, time.Second, Deleted},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := Diagnose(tt.infos, tt.known, tt.since)
			require.Equal(t, tt.want, got)
		})
	}
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestVanishLogsOncePerCausePerMinute: the first vanish of a cause is
// logged; the next within the minute are counted, and told with the next
// line of that cause, a minute later. Time is the test's (Vanish.Now).
func TestVanishLogsOncePerCausePerMinute(t *testing.T) {
	srv := redistest.Start(t)
	var log lockedBuf
	var now atomic.Int64
	v := &Vanish{Client: srv.Client(t), Logger: slog.New(slog.NewTextHandler(&log, nil)), Now: func() time.Duration { return time.Duration(now.Load()) }}
	report := func(op string) {
		v.Report(op, 0) // up longer than the run: deleted or flushed
		require.Eventually(t, func() bool { return !v.Busy() }, 10*time.Second, time.Millisecond)
	}
	report("complete")
	require.Equal(t, 1, strings.Count(log.String(), "level=ERROR"), log.String())
	require.Contains(t, log.String(), "a record vanished while its owner held it (deleted or flushed)")
	require.Contains(t, log.String(), "op=complete")
	for range 3 {
		report("checkpoint")
	}
	require.Equal(t, 1, strings.Count(log.String(), "level=ERROR"), "logged again within the minute: %s", log.String())
	now.Store(int64(vanishEvery))
	report("extend")
	require.Equal(t, 2, strings.Count(log.String(), "level=ERROR"), log.String())
	require.Contains(t, log.String(), "more_since_last_logged=3")
}
