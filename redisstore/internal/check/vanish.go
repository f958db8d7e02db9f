package check

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Vanish logs the records that vanished under their owners (a completion,
// checkpoint or heartbeat found the record gone, not another owner's):
// for each, in the background, it asks Redis why (INFO on every master),
// and logs an error naming the likely cause, at most once per cause per
// minute, with the count of those not logged since. It is safe for
// concurrent use; the zero value needs Client and Logger.
type Vanish struct {
	// Client is the store's client.
	Client redis.Scripter
	// Logger receives the errors.
	Logger *slog.Logger
	// Now, if not nil, replaces the monotonic clock (for tests).
	Now func() time.Duration
	// Known, if not nil, returns the masters' run_ids as last seen, by
	// address (Startup's checks): a master whose run_id changed restarted.
	Known func() map[string]string

	mu      sync.Mutex
	running bool                    // a diagnosis runs
	queued  []vanished              // found while it ran: diagnosed next
	logged  map[Cause]time.Duration // when each cause was last logged
	unsaid  map[Cause]int           // vanishes of each cause not logged since
}

// vanished is one record found gone.
type vanished struct {
	op    string        // "complete", "checkpoint" or "extend"
	since time.Duration // since the owner's last acknowledged sign of life
}

// Cause is why a record vanished, as far as Redis tells.
type Cause string

// The causes Vanish tells apart.
const (
	Restarted Cause = "Redis restarted"                      // a master's uptime is shorter than the time since the owner's last sign of life
	Evicted   Cause = "evicted"                              // an evicting policy, and evicted_keys above zero
	Deleted   Cause = "deleted or flushed"                   // neither: FLUSHALL, FLUSHDB, DEL, or 'idemkey forget'
	Unknown   Cause = "evicted, flushed, or Redis restarted" // Redis could not be asked
)

// vanishEvery is how often one cause is logged at most.
const vanishEvery = time.Minute

func (v *Vanish) now() time.Duration {
	if v.Now != nil {
		return v.Now()
	}
	return time.Since(startupEpoch)
}

// Report says that op found its record gone, since after the owner's last
// acknowledged sign of life (claim, heartbeat, checkpoint). It returns at
// once; the diagnosis runs in the background, one at a time.
func (v *Vanish) Report(op string, since time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.queued = append(v.queued, vanished{op, since})
	if !v.running {
		v.running = true
		go v.run()
	}
}

// Busy reports whether a diagnosis runs or waits (for tests).
func (v *Vanish) Busy() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.running
}

// run diagnoses what is queued, until nothing is.
func (v *Vanish) run() {
	for {
		v.mu.Lock()
		queue := v.queued
		v.queued = nil
		if len(queue) == 0 {
			v.running = false
			v.mu.Unlock()
			return
		}
		v.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), startupTime)
		infos := v.infos(ctx)
		cancel()
		var known map[string]string
		if v.Known != nil {
			known = v.Known()
		}
		for _, x := range queue {
			cause, detail := Diagnose(infos, known, x.since)
			v.log(x, cause, detail)
		}
	}
}

// infos returns INFO's fields of every master, by address; nil if any
// cannot be read.
func (v *Vanish) infos(ctx context.Context) map[string]map[string]string {
	servers, err := Servers(ctx, v.Client)
	if err != nil {
		return nil
	}
	infos := make(map[string]map[string]string, len(servers))
	for _, s := range servers {
		text, err := s.C.Info(ctx, "server", "stats", "memory").Result()
		if err != nil {
			return nil
		}
		infos[s.Addr] = parseInfo(text)
	}
	return infos
}

// log logs x unless its cause was logged within the minute.
func (v *Vanish) log(x vanished, cause Cause, detail string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.logged == nil {
		v.logged, v.unsaid = map[Cause]time.Duration{}, map[Cause]int{}
	}
	now := v.now()
	if last, ok := v.logged[cause]; ok && now-last < vanishEvery {
		v.unsaid[cause]++
		return
	}
	v.logged[cause] = now
	attrs := []any{"op", x.op, "cause", string(cause)}
	if detail != "" {
		attrs = append(attrs, "detail", detail)
	}
	if n := v.unsaid[cause]; n > 0 {
		attrs = append(attrs, "more_since_last_logged", n)
		v.unsaid[cause] = 0
	}
	v.Logger.Error("redisstore: a record vanished while its owner held it ("+string(cause)+"): its outcome cannot be stored, "+
		"and a retry runs the operation again; see docs/operating.md (persistence, eviction)", attrs...)
}

// Diagnose tells why a record vanished, since after its owner's last sign
// of life, from INFO's fields of every master by address (nil: unknown)
// and the run_ids known before (may be nil): a master restarted since,
// else evicted (an evicting policy that has evicted keys), else deleted or
// flushed. A master restarted since if its uptime (whole seconds) is
// surely shorter; when the second leaves it open, if its run_id changed.
func Diagnose(infos map[string]map[string]string, known map[string]string, since time.Duration) (Cause, string) {
	if len(infos) == 0 {
		return Unknown, ""
	}
	for addr, info := range infos {
		up, err := strconv.ParseInt(info["uptime_in_seconds"], 10, 64)
		if err != nil {
			continue
		}
		uptime := time.Duration(up) * time.Second // up to a second short
		was := known[addr]
		if uptime+time.Second <= since || (uptime < since && was != "" && was != info["run_id"]) {
			return Restarted, fmt.Sprintf("up %ds, the owner's last sign of life %v ago: without persistence (or since the last fsync or snapshot) a restart forgets records",
				up, since.Round(time.Millisecond))
		}
	}
	for _, info := range infos {
		policy := info["maxmemory_policy"]
		if n, _ := strconv.ParseInt(info["evicted_keys"], 10, 64); n > 0 && policy != "" && evicts(policy) {
			return Evicted, fmt.Sprintf("maxmemory-policy %s has evicted %d keys: set noeviction", policy, n)
		}
	}
	return Deleted, ""
}
