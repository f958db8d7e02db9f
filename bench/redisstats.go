package bench

import (
	"context"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// commandStats returns the calls of each command from INFO commandstats,
// keyed by the command's name ("evalsha", "config|resetstat", ...).
func commandStats(ctx context.Context, c *redis.Client) (map[string]int64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("info commandstats: %w", err)
	}
	stats := map[string]int64{}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		name, ok = strings.CutPrefix(name, "cmdstat_")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		calls, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("info commandstats: line %q: %w", line, err)
		}
		stats[name] = calls
	}
	return stats, nil
}

// redisCPU returns the CPU time (user and system) redis-server has used,
// from INFO cpu.
func redisCPU(ctx context.Context, c *redis.Client) (time.Duration, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("info cpu: %w", err)
	}
	var total float64
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("info cpu: %q: %w", line, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// scriptCommands are the commands idemkey's Lua scripts run. The server
// counts a script's commands in commandstats like top-level ones; the
// client never sends them itself, which the client-side count confirms.
var scriptCommands = map[string]bool{
	"hmget": true, "hset": true, "hincrby": true, "hdel": true, "hgetall": true,
	"set": true, "del": true, "pexpire": true, "pttl": true,
}

// ignoredCommands are the measuring commands themselves.
func ignoredCommand(name string) bool {
	return name == "info" || strings.HasPrefix(name, "config")
}

// fillCost fills c's per-request server figures from the stats gathered
// after CONFIG RESETSTAT and n requests.
func fillCost(c *Cost, stats map[string]int64, n int) {
	per := func(v int64) float64 { return round3(float64(v) / float64(n)) }
	c.Commands = map[string]float64{}
	for name, calls := range stats {
		switch {
		case ignoredCommand(name):
		case name == "evalsha":
			c.EvalSHA = per(calls)
		case name == "eval":
			c.Eval = per(calls)
		case scriptCommands[name]:
			c.ScriptCommands += float64(calls)
			c.Commands[name] = per(calls)
		default:
			c.OtherTopLevel += float64(calls)
			c.Commands[name] = per(calls)
		}
	}
	c.ScriptCommands = round3(c.ScriptCommands / float64(n))
	c.OtherTopLevel = round3(c.OtherTopLevel / float64(n))
	c.ServerRoundTrips = round3(c.EvalSHA + c.Eval + c.OtherTopLevel)
}

// jemallocSize returns the size class jemalloc (Redis's allocator) serves a
// request of n bytes from, for n up to a few pages: 8, then multiples of 16
// up to 128, then four classes per doubling.
func jemallocSize(n int) int {
	switch {
	case n <= 8:
		return 8
	case n <= 128:
		return (n + 15) &^ 15
	}
	k := bits.Len(uint(n-1)) - 1 // 2^k < n <= 2^(k+1)
	step := 1 << (k - 2)
	return (n + step - 1) &^ (step - 1)
}

// sdsAlloc returns the bytes Redis asks the allocator for to hold a string
// of n bytes: the sds header for that length, the bytes, a terminating NUL.
func sdsAlloc(n int) int {
	switch {
	case n < 1<<8:
		return n + 3 + 1
	case n < 1<<16:
		return n + 5 + 1
	default:
		return n + 9 + 1
	}
}
