package check

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/redisstore/internal/record"
	"github.com/idemkey/idemkey/redisstore/internal/script"
)

// globEscaper escapes the characters SCAN's MATCH pattern treats specially.
var globEscaper = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)

// EscapeGlob escapes s for SCAN's MATCH pattern, which then matches s
// itself.
func EscapeGlob(s string) string { return globEscaper.Replace(s) }

// inProgress is what the in-progress check found.
type inProgressFound struct {
	scanned, records, started, running, lapsed, legacy int
	partial                                            bool
	oldestLapse                                        int64 // ms since the longest-lapsed lease ran out
	oldestLapseKey                                     string
	oldestCreated                                      int64 // Unix ms of the oldest started record's first claim
	oldestKey                                          string
}

func (t *Target) inProgress(ctx context.Context, nodes []node) Result {
	var f inProgressFound
	for _, n := range nodes {
		if err := t.scanNode(ctx, n, &f); err != nil {
			return Result{InProgress, Warn, fmt.Sprintf("SCAN of %s failed: %v", n.addr, err)}
		}
	}
	msg := fmt.Sprintf("%d records under %q", f.records, t.Prefix)
	if f.partial {
		msg += fmt.Sprintf(" (a partial count: the scan stopped after about %d keys)", f.scanned)
	}
	if f.legacy > 0 {
		msg += fmt.Sprintf(", %d in the previous format", f.legacy)
	}
	if f.started == 0 {
		return Result{InProgress, OK, msg + ", none in progress"}
	}
	msg += fmt.Sprintf(", %d in progress: %d with a live lease, %d whose lease ran out", f.started, f.running, f.lapsed)
	if f.oldestKey != "" {
		msg += fmt.Sprintf("; oldest started %s ago (%s)", time.Since(time.UnixMilli(f.oldestCreated)).Round(time.Second), f.oldestKey)
	}
	if f.lapsed == 0 {
		return Result{InProgress, OK, msg}
	}
	if f.oldestLapseKey != "" {
		msg += fmt.Sprintf("; the longest-lapsed lease ran out %s ago (%s)",
			(time.Duration(f.oldestLapse) * time.Millisecond).Round(time.Millisecond), f.oldestLapseKey)
	}
	msg += ". Runs that ended without an outcome left them: " +
		"a retry with the key takes each over; without one they expire with the retention"
	return Result{InProgress, Warn, msg}
}

// scanNode looks at the records of one node, within the check's budget.
func (t *Target) scanNode(ctx context.Context, n node, f *inProgressFound) error {
	match := globEscaper.Replace(t.Prefix) + "{*}"
	deadline := time.Now().Add(checkScanTime)
	var cursor uint64
	for seen := 0; ; {
		keys, next, err := n.c.Scan(ctx, cursor, match, checkScanCount).Result()
		if err != nil {
			return err
		}
		if err := t.inspectKeys(ctx, n, keys, f); err != nil {
			return err
		}
		seen += checkScanCount // SCAN looks at about COUNT keys a call
		f.scanned += checkScanCount
		cursor = next
		if cursor == 0 {
			return nil
		}
		if seen >= checkScanKeys || time.Now().After(deadline) {
			f.partial = true
			return nil
		}
	}
}

// inspectKeys reads the head and PTTL of each key in one pipeline, and
// whole only the records in progress.
func (t *Target) inspectKeys(ctx context.Context, n node, keys []string, f *inProgressFound) error {
	if len(keys) == 0 {
		return nil
	}
	p := n.c.Pipeline()
	heads := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		heads[i] = p.GetRange(ctx, k, 0, checkHeaderLen-1)
		ttls[i] = p.PTTL(ctx, k)
	}
	if _, err := p.Exec(ctx); err != nil && !script.IsFinal(err) {
		return err
	}
	var startedKeys []string
	for i, k := range keys {
		head, err := heads[i].Result()
		if err != nil {
			if redis.HasErrorPrefix(err, "WRONGTYPE") {
				f.legacy++
			}
			continue
		}
		f.records++
		if head == "" || head[0] != record.KindStarted {
			continue
		}
		f.started++
		startedKeys = append(startedKeys, k)
		thr, ok := record.Threshold(head)
		ttl := ttls[i].Val()
		if !ok || ttl < 0 {
			continue
		}
		released := len(head) > 1 && head[1] == record.FlagReleased // its owner gave the lease back: nobody holds it
		switch left := ttl.Milliseconds() - thr; {
		case left > 0 && !released:
			f.running++
		case released:
			f.lapsed++
		default:
			f.lapsed++
			if -left >= f.oldestLapse {
				f.oldestLapse, f.oldestLapseKey = -left, k
			}
		}
	}
	if len(startedKeys) == 0 {
		return nil
	}
	// Records in progress are small (no response yet): read them whole for
	// their creation time.
	p = n.c.Pipeline()
	values := make([]*redis.StringCmd, len(startedKeys))
	for i, k := range startedKeys {
		values[i] = p.Get(ctx, k)
	}
	if _, err := p.Exec(ctx); err != nil && !script.IsFinal(err) && !errors.Is(err, redis.Nil) {
		return err
	}
	now := time.Now().UnixMilli()
	for i, k := range startedKeys {
		r, _, ok := record.ParseStarted(values[i].Val())
		if ok && r.CreatedMS > 0 && r.CreatedMS <= now && (f.oldestKey == "" || r.CreatedMS < f.oldestCreated) {
			f.oldestCreated, f.oldestKey = r.CreatedMS, k
		}
	}
	return nil
}
