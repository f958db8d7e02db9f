package bench

import (
	"context"
	"fmt"
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

// scriptCommands are the commands idemkey's Lua scripts (today's and the
// legacy one) and the floor's run. The server counts a script's commands in
// commandstats like top-level ones; no contender sends them itself, which
// the client-side count confirms.
var scriptCommands = map[string]bool{
	"get": true, "set": true, "del": true, "pttl": true, "pexpire": true, "type": true,
	"hmget": true, "hset": true, "hincrby": true, "hdel": true, "hgetall": true,
}

// ignoredCommand reports whether name is one of the measuring commands
// themselves.
func ignoredCommand(name string) bool {
	return name == "info" || strings.HasPrefix(name, "config")
}

// commandsOf returns what the stats gathered after CONFIG RESETSTAT come to
// per unit, n units (requests or storm keys) having been served.
func commandsOf(stats map[string]int64, n int) Commands {
	per := func(v int64) float64 { return round3(float64(v) / float64(n)) }
	c := Commands{ByName: map[string]float64{}}
	var script, other, total int64
	for name, calls := range stats {
		switch {
		case ignoredCommand(name):
			continue
		case name == "evalsha":
			c.EvalSHA = per(calls)
		case name == "eval":
			c.Eval = per(calls)
		case scriptCommands[name]:
			script += calls
			c.ByName[name] = per(calls)
		default:
			other += calls
			c.ByName[name] = per(calls)
		}
		total += calls
	}
	c.Script, c.Other, c.Total = per(script), per(other), per(total)
	return c
}
