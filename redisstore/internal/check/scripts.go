package check

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// scripts is the scripts check: SCRIPT LOAD of every source, then a claim
// of a throwaway key and its release.
func (t *Target) scripts(ctx context.Context) Result {
	result := func(st Status, format string, args ...any) Result {
		return Result{Name: Scripts, Status: st, Message: fmt.Sprintf(format, args...)}
	}
	for _, src := range t.Sources {
		if err := t.Client.ScriptLoad(ctx, src).Err(); err != nil {
			return result(Fail, "SCRIPT LOAD failed: %v", err)
		}
	}
	n := len(t.Sources)
	var b [16]byte
	_, _ = rand.Read(b[:])
	start := time.Now()
	release, err := t.Claim(ctx, hex.EncodeToString(b[:]))
	if err != nil {
		return result(Fail, "%d scripts loaded, but a claim failed: %v", n, err)
	}
	if err := release(ctx); err != nil {
		return result(Fail, "%d scripts loaded and a claim ran, but its release failed: %v", n, err)
	}
	return result(OK, "%d scripts loaded; a claim and its release ran in %s", n, time.Since(start).Round(time.Microsecond))
}
