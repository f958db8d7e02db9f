// Package check checks a Redis deployment for use as idemkey's store, for
// redisstore's Store.Check (and so 'idemkey doctor'): the server's version,
// eviction, persistence, replication, the cluster, the scripts (a callback:
// it needs the store), latency, and the records left in progress. It
// returns plain results; redisstore maps them to its public CheckResult.
package check

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Status is how a check went.
type Status string

// The statuses of a check (redisstore.CheckOK, CheckWarn, CheckFail).
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "fail"
)

// The names of the checks, in the order Run runs them: a public contract
// (CheckResult.Name, 'idemkey doctor --json').
const (
	Version     = "version"          // the server's version: 7.0 or newer
	Eviction    = "maxmemory-policy" // fails when Redis evicts (an evicted record runs again)
	Persistence = "persistence"      // warns with neither AOF nor RDB
	Replication = "replication"      // the role, the replicas, and Options.Replicas
	Cluster     = "cluster"          // cluster mode, its state, and the client's kind
	Scripts     = "scripts"          // loads the scripts, runs a claim and its release
	Latency     = "latency"          // round-trip p50 and p99 over checkPings PINGs
	InProgress  = "in-progress"      // records under the prefix still in progress
)

// Result is the result of one check.
type Result struct {
	Name    string // one of the names above
	Status  Status
	Message string // one line: what the check found and, for warn and fail, what to do
}

// Target is the deployment to check, as the store sees it.
type Target struct {
	// Client is the store's client.
	Client redis.Scripter
	// Prefix starts the store's keys.
	Prefix string
	// Replicas is the store's Options.Replicas.
	Replicas int
	// Sources are the scripts the scripts check loads.
	Sources []string
	// Claim, for the scripts check, claims key, a throwaway one, with the
	// store (which this package does not know), and returns the claim's
	// release.
	Claim func(ctx context.Context, key string) (release func(context.Context) error, err error)
}

// Run runs the checks on t, in the order of their names (see
// redisstore.Store.Check). It returns an error, and no results, only when
// Redis cannot be reached (a PING fails) or t.Client is not a
// redis.Cmdable.
func (t *Target) Run(ctx context.Context) ([]Result, error) {
	nodes, err := t.nodes(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if err := n.c.Ping(ctx).Err(); err != nil {
			return nil, fmt.Errorf("redisstore: check: %s: %w", n.addr, err)
		}
	}
	for i := range nodes {
		nodes[i].read(ctx)
	}
	return []Result{
		version(nodes),
		eviction(nodes),
		persistence(nodes),
		t.replication(nodes),
		t.cluster(ctx, nodes),
		t.scripts(ctx),
		latency(ctx, nodes[0]),
		t.inProgress(ctx, nodes),
	}, nil
}

const (
	checkPings       = 300             // PINGs the latency check sends
	checkPingTime    = 3 * time.Second // at most, for all of them
	checkScanKeys    = 100_000         // keys the in-progress check looks at, at most, per node
	checkScanTime    = 5 * time.Second // at most, per node
	checkScanCount   = 1000            // SCAN's COUNT
	checkHeaderLen   = 96              // bytes of a record read to tell its kind, attempt and threshold
	slowP50, slowP99 = 5 * time.Millisecond, 25 * time.Millisecond
)

// node is one Redis server Check looks at: a master of a cluster, a
// shard of a Ring, or the one server.
type node struct {
	addr      string
	c         redis.Cmdable
	info      map[string]string // INFO's fields
	infoErr   error
	save      string // CONFIG GET save
	appendfs  string // CONFIG GET appendfsync
	configErr error  // CONFIG GET's error: disabled
}

// nodes returns the servers to check.
func (t *Target) nodes(ctx context.Context) ([]node, error) {
	servers, err := Servers(ctx, t.Client)
	if err != nil {
		return nil, fmt.Errorf("redisstore: check: %w", err)
	}
	nodes := make([]node, len(servers))
	for i, s := range servers {
		nodes[i] = node{addr: s.Addr, c: s.C}
	}
	return nodes, nil
}

// Server is one Redis server that holds records: a master of a cluster, a
// shard of a Ring, or the one server.
type Server struct {
	// Addr is its address, or "redis" for a client that does not tell.
	Addr string
	// C sends commands to it alone.
	C redis.Cmdable
}

// Servers returns the servers that hold client's keys, sorted by address:
// every master of a *redis.ClusterClient, every shard of a *redis.Ring, the
// server of a *redis.Client, or any other redis.Cmdable as one server (an
// auto-pipeliner hides its client: through one, a cluster shows as one
// server). It fails for a client that is not a redis.Cmdable, or when a
// cluster's or Ring's servers cannot be listed.
func Servers(ctx context.Context, client redis.Scripter) ([]Server, error) {
	var (
		mu      sync.Mutex
		servers []Server
	)
	collect := func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		servers = append(servers, Server{Addr: c.Options().Addr, C: c})
		return nil
	}
	var err error
	switch c := client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, collect)
	case *redis.Ring:
		err = c.ForEachShard(ctx, collect)
	case *redis.Client:
		servers = []Server{{Addr: c.Options().Addr, C: c}}
	case redis.Cmdable:
		servers = []Server{{Addr: "redis", C: c}}
	default:
		return nil, fmt.Errorf("needs a redis.Cmdable client, not %T", client)
	}
	if err != nil {
		return nil, err
	}
	if len(servers) == 0 {
		return nil, errors.New("no Redis server to check")
	}
	slices.SortFunc(servers, func(a, b Server) int { return strings.Compare(a.Addr, b.Addr) })
	return servers, nil
}

// read fetches INFO and what CONFIG GET tells.
func (n *node) read(ctx context.Context) {
	var text string
	text, n.infoErr = n.c.Info(ctx).Result()
	n.info = parseInfo(text)
	var save map[string]string
	if save, n.configErr = n.c.ConfigGet(ctx, "save").Result(); n.configErr == nil {
		n.save = save["save"]
		fs, err := n.c.ConfigGet(ctx, "appendfsync").Result()
		if err == nil {
			n.appendfs = fs["appendfsync"]
		}
		if _, ok := n.info["maxmemory_policy"]; !ok {
			if m, err := n.c.ConfigGet(ctx, "maxmemory*").Result(); err == nil {
				n.info["maxmemory_policy"], n.info["maxmemory"] = m["maxmemory-policy"], m["maxmemory"]
			}
		}
	}
}

// parseInfo parses INFO's "field:value" lines.
func parseInfo(text string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			m[k] = v
		}
	}
	return m
}

// where names the nodes a finding applies to, when there are several.
func where(nodes []node, addrs []string) string {
	if len(nodes) == 1 {
		return ""
	}
	return " on " + strings.Join(addrs, ", ")
}

func version(nodes []node) Result {
	r := Result{Name: Version, Status: OK}
	var versions, old, sentinel []string
	for _, n := range nodes {
		if n.infoErr != nil {
			return Result{Version, Warn, fmt.Sprintf("INFO failed on %s: %v", n.addr, n.infoErr)}
		}
		if n.info["redis_version"] == "" {
			return Result{Version, Warn, fmt.Sprintf("%s does not give its version in INFO (not Redis?); the scripts check tells whether it runs them", n.addr)}
		}
		v := "Redis " + n.info["redis_version"]
		if n.info["server_name"] == "valkey" && n.info["valkey_version"] != "" {
			v = "Valkey " + n.info["valkey_version"]
		}
		if !slices.Contains(versions, v) {
			versions = append(versions, v)
		}
		major, _, _ := strings.Cut(n.info["redis_version"], ".")
		if m, err := strconv.Atoi(major); err != nil || m < 7 {
			old = append(old, n.addr)
		}
		if n.info["redis_mode"] == "sentinel" {
			sentinel = append(sentinel, n.addr)
		}
	}
	mode := nodes[0].info["redis_mode"]
	if len(nodes) > 1 {
		mode = fmt.Sprintf("%s, %d masters", mode, len(nodes))
	}
	r.Message = fmt.Sprintf("%s (%s)", strings.Join(versions, ", "), mode)
	switch {
	case len(sentinel) > 0:
		r.Status = Fail
		r.Message += ": this is a Sentinel, not a data node; reach the master through a failover client"
	case len(old) > 0:
		r.Status = Fail
		r.Message += ": idemkey's scripts need Redis 7.0 or newer (SET with NX and GET)" + where(nodes, old)
	}
	return r
}

// evicts reports whether a maxmemory-policy may evict idempotency records:
// every policy but noeviction does, the volatile ones too, as every record
// has a TTL.
func evicts(policy string) bool { return policy != "noeviction" }

func eviction(nodes []node) Result {
	var bad, lax, unknown, ok []string
	for _, n := range nodes {
		policy, limit := n.info["maxmemory_policy"], n.info["maxmemory"]
		if policy == "" {
			unknown = append(unknown, n.addr)
			continue
		}
		bytes, _ := strconv.ParseInt(limit, 10, 64)
		switch {
		case evicts(policy) && bytes > 0:
			bad = append(bad, fmt.Sprintf("%s with maxmemory %s", policy, sizeString(bytes)))
		case evicts(policy):
			lax = append(lax, policy)
		case bytes > 0:
			ok = append(ok, fmt.Sprintf("noeviction with maxmemory %s (writes fail when full; nothing is evicted)", sizeString(bytes)))
		default:
			ok = append(ok, "noeviction, no maxmemory")
		}
	}
	join := func(list []string) string {
		return strings.Join(slices.Compact(slices.Sorted(slices.Values(list))), "; ")
	}
	switch {
	case len(bad) > 0:
		return Result{Eviction, Fail, join(bad) +
			": Redis evicts records when it is full, and a retry whose record was evicted runs again; set maxmemory-policy noeviction"}
	case len(unknown) > 0:
		return Result{Eviction, Warn, "cannot read maxmemory-policy (CONFIG is disabled, managed Redis?, and INFO does not show it)" +
			where(nodes, unknown) + ": make sure it is noeviction"}
	case len(lax) > 0:
		return Result{Eviction, Warn, join(lax) +
			" without maxmemory: nothing is evicted until a maxmemory is set, then records would be; set maxmemory-policy noeviction"}
	}
	return Result{Eviction, OK, join(ok)}
}

// noPersistence returns the addresses of the nodes with neither AOF nor
// RDB snapshots (those where CONFIG is disabled are not known to).
func noPersistence(nodes []node) []string {
	var none []string
	for _, n := range nodes {
		if n.info["aof_enabled"] != "1" && n.configErr == nil && strings.TrimSpace(n.save) == "" {
			none = append(none, n.addr)
		}
	}
	return none
}

func persistence(nodes []node) Result {
	var none, unknown, failed, found []string
	for _, n := range nodes {
		aof := n.info["aof_enabled"] == "1"
		rdb := n.configErr == nil && strings.TrimSpace(n.save) != ""
		if n.info["rdb_last_bgsave_status"] == "err" || n.info["aof_last_write_status"] == "err" {
			failed = append(failed, n.addr)
		}
		switch {
		case aof && rdb:
			found = append(found, fmt.Sprintf("AOF (appendfsync %s) and RDB (save %s)", n.appendfs, n.save))
		case aof && n.configErr != nil:
			found = append(found, "AOF (CONFIG is disabled: fsync policy and RDB schedule unknown)")
		case aof:
			found = append(found, fmt.Sprintf("AOF (appendfsync %s)", n.appendfs))
		case rdb:
			found = append(found, fmt.Sprintf("RDB snapshots (save %s), no AOF: a crash forgets the records written since the last snapshot", n.save))
		case n.configErr != nil:
			unknown = append(unknown, n.addr)
		default:
			none = append(none, n.addr)
		}
	}
	switch {
	case len(none) > 0:
		return Result{Persistence, Warn, "neither AOF nor RDB" + where(nodes, none) +
			": a restart forgets every record, and retries after it run again; enable appendonly yes"}
	case len(unknown) > 0:
		return Result{Persistence, Warn, "CONFIG is disabled (managed Redis?)" + where(nodes, unknown) +
			": AOF is off and the RDB schedule cannot be read; check your provider's persistence settings"}
	case len(failed) > 0:
		return Result{Persistence, Warn, "the last RDB or AOF write failed" + where(nodes, failed) + "; see the Redis log"}
	}
	return Result{Persistence, OK, strings.Join(slices.Compact(slices.Sorted(slices.Values(found))), "; ")}
}

func (t *Target) replication(nodes []node) Result {
	var replicas []string
	lowest, maxLag := -1, 0
	for _, n := range nodes {
		if n.info["role"] == "slave" {
			return Result{Replication, Fail, fmt.Sprintf("%s is a replica of %s:%s: writes fail (READONLY); connect to the master",
				n.addr, n.info["master_host"], n.info["master_port"])}
		}
		online := 0
		for i := 0; ; i++ {
			v, ok := n.info["slave"+strconv.Itoa(i)]
			if !ok {
				break
			}
			f := map[string]string{}
			for kv := range strings.SplitSeq(v, ",") {
				k, val, _ := strings.Cut(kv, "=")
				f[k] = val
			}
			if f["state"] == "online" {
				online++
				if lag, err := strconv.Atoi(f["lag"]); err == nil {
					maxLag = max(maxLag, lag)
				}
			}
		}
		if lowest < 0 || online < lowest {
			lowest = online
		}
		replicas = append(replicas, strconv.Itoa(online))
	}
	msg := fmt.Sprintf("master with %s replicas online", strings.Join(replicas, "/"))
	if len(nodes) > 1 {
		msg = fmt.Sprintf("%d masters with %s replicas online", len(nodes), strings.Join(replicas, "/"))
	}
	switch {
	case t.Replicas > lowest:
		return Result{Replication, Fail, fmt.Sprintf("%s, but Options.Replicas is %d: every claim fails with ErrNotReplicated",
			msg, t.Replicas)}
	case lowest > 0 && t.Replicas == 0:
		msg += fmt.Sprintf(" (lag up to %ds); writes are not awaited (Options.Replicas is 0): a failover may lose the latest records", maxLag)
	case lowest > 0:
		msg += fmt.Sprintf(" (lag up to %ds); every write awaits %d", maxLag, t.Replicas)
	default:
		msg += ": a failover has nothing to promote; persistence is what keeps the records"
	}
	return Result{Replication, OK, msg}
}

func latency(ctx context.Context, n node) Result {
	var rtts []time.Duration
	deadline := time.Now().Add(checkPingTime)
	for range checkPings {
		start := time.Now()
		if err := n.c.Ping(ctx).Err(); err != nil {
			return Result{Latency, Fail, fmt.Sprintf("PING failed after %d: %v", len(rtts), err)}
		}
		rtts = append(rtts, time.Since(start))
		if time.Now().After(deadline) {
			break
		}
	}
	slices.Sort(rtts)
	p50, p99 := rtts[len(rtts)/2], rtts[min(len(rtts)-1, len(rtts)*99/100)]
	msg := fmt.Sprintf("round trip p50 %s, p99 %s over %d PINGs", p50.Round(time.Microsecond), p99.Round(time.Microsecond), len(rtts))
	if p50 >= slowP50 || p99 >= slowP99 {
		return Result{Latency, Warn, msg + ": slow; a first request costs two round trips, a replay one"}
	}
	return Result{Latency, OK, msg}
}

// sizeString formats bytes as "64.0 MiB".
func sizeString(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
