package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/internal/keyslot"
	"github.com/idemkey/idemkey/lua"
)

// CheckStatus is how a check of the Redis deployment went.
type CheckStatus string

// The statuses of a check.
const (
	// CheckOK: nothing to do.
	CheckOK CheckStatus = "ok"
	// CheckWarn: the store works, but something deserves a look, or could not
	// be checked.
	CheckWarn CheckStatus = "warn"
	// CheckFail: the store cannot keep its promise on this deployment: a
	// request may run twice, or none will run.
	CheckFail CheckStatus = "fail"
)

// The names of the checks, in the order Check runs them.
const (
	CheckVersion     = "version"          // the server's version: 7.0 or newer
	CheckEviction    = "maxmemory-policy" // fails when Redis evicts (an evicted record runs again)
	CheckPersistence = "persistence"      // warns with neither AOF nor RDB
	CheckReplication = "replication"      // the role, the replicas, and Options.Replicas
	CheckCluster     = "cluster"          // cluster mode, its state, and the client's kind
	CheckScripts     = "scripts"          // loads the scripts, runs a claim and its release
	CheckLatency     = "latency"          // round-trip p50 and p99 over checkPings PINGs
	CheckInProgress  = "in-progress"      // records under the prefix still in progress
)

// CheckResult is the result of one check.
type CheckResult struct {
	// Name is the check's name, one of the Check* constants.
	Name string `json:"name"`
	// Status is ok, warn or fail.
	Status CheckStatus `json:"status"`
	// Message says, in one line, what the check found and, for warn and
	// fail, what to do.
	Message string `json:"message"`
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

// Check checks the Redis deployment the store runs on for use as an
// idempotency store, as 'idemkey doctor' does, and returns one result per
// check, in the order of the Check* names: the server version (7.0 or newer);
// maxmemory-policy (fail when Redis may evict: an evicted record runs
// again); persistence (warn with neither AOF nor RDB); replication (fail on
// a replica, or with fewer replicas than Options.Replicas); the cluster
// (fail when its state is not ok, or a cluster is reached through a
// single-node client); loading the scripts and running a claim and its
// release on a throwaway key; the round-trip latency; and the records under
// the prefix still in progress (warn about those whose lease ran out: runs
// that ended without an outcome, waiting for a retry to take them over).
//
// Where CONFIG is disabled (managed Redis), Check reads what INFO shows and
// warns about what it cannot tell. On a cluster or a Ring it checks every
// master; through an auto-pipeliner, which hides its client, it sees one
// server, and on a cluster warns that it did, once it has found that the
// pipeliner routes by slot. It sends a few hundred commands, and SCANs at
// most 100,000 keys (or 5 seconds) per node; the Observer sees none of it.
//
// It returns an error, and no results, only when Redis cannot be reached
// (a PING fails) or the store's client is not a redis.Cmdable (a
// *redis.Client, *redis.ClusterClient or *redis.Ring is). It is safe for
// concurrent use.
func (s *Store) Check(ctx context.Context) ([]CheckResult, error) {
	nodes, err := s.checkNodes(ctx)
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
	return []CheckResult{
		checkVersion(nodes),
		checkEviction(nodes),
		checkPersistence(nodes),
		s.checkReplication(nodes),
		s.checkCluster(ctx, nodes),
		s.checkScripts(ctx),
		checkLatency(ctx, nodes[0]),
		s.checkInProgress(ctx, nodes),
	}, nil
}

// checkNode is one Redis server Check looks at: a master of a cluster, a
// shard of a Ring, or the one server.
type checkNode struct {
	addr      string
	c         redis.Cmdable
	info      map[string]string // INFO's fields
	infoErr   error
	save      string // CONFIG GET save
	appendfs  string // CONFIG GET appendfsync
	configErr error  // CONFIG GET's error: disabled
}

// checkNodes returns the servers to check.
func (s *Store) checkNodes(ctx context.Context) ([]checkNode, error) {
	var (
		mu    sync.Mutex
		nodes []checkNode
	)
	collect := func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, checkNode{addr: c.Options().Addr, c: c})
		return nil
	}
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, collect)
	case *redis.Ring:
		err = c.ForEachShard(ctx, collect)
	case *redis.Client:
		nodes = []checkNode{{addr: c.Options().Addr, c: c}}
	case redis.Cmdable:
		nodes = []checkNode{{addr: "redis", c: c}}
	default:
		return nil, fmt.Errorf("redisstore: check: needs a redis.Cmdable client, not %T", s.client)
	}
	if err != nil {
		return nil, fmt.Errorf("redisstore: check: %w", err)
	}
	if len(nodes) == 0 {
		return nil, errors.New("redisstore: check: no Redis server to check")
	}
	slices.SortFunc(nodes, func(a, b checkNode) int { return strings.Compare(a.addr, b.addr) })
	return nodes, nil
}

// read fetches INFO and what CONFIG GET tells.
func (n *checkNode) read(ctx context.Context) {
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
func where(nodes []checkNode, addrs []string) string {
	if len(nodes) == 1 {
		return ""
	}
	return " on " + strings.Join(addrs, ", ")
}

func checkVersion(nodes []checkNode) CheckResult {
	r := CheckResult{Name: CheckVersion, Status: CheckOK}
	var versions, old, sentinel []string
	for _, n := range nodes {
		if n.infoErr != nil {
			return CheckResult{CheckVersion, CheckWarn, fmt.Sprintf("INFO failed on %s: %v", n.addr, n.infoErr)}
		}
		if n.info["redis_version"] == "" {
			return CheckResult{CheckVersion, CheckWarn, fmt.Sprintf("%s does not give its version in INFO (not Redis?); the scripts check tells whether it runs them", n.addr)}
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
		r.Status = CheckFail
		r.Message += ": this is a Sentinel, not a data node; reach the master through a failover client"
	case len(old) > 0:
		r.Status = CheckFail
		r.Message += ": idemkey's scripts need Redis 7.0 or newer (SET with NX and GET)" + where(nodes, old)
	}
	return r
}

// evicts reports whether a maxmemory-policy may evict idempotency records:
// every policy but noeviction does, the volatile ones too, as every record
// has a TTL.
func evicts(policy string) bool { return policy != "noeviction" }

func checkEviction(nodes []checkNode) CheckResult {
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
		return CheckResult{CheckEviction, CheckFail, join(bad) +
			": Redis evicts records when it is full, and a retry whose record was evicted runs again; set maxmemory-policy noeviction"}
	case len(unknown) > 0:
		return CheckResult{CheckEviction, CheckWarn, "cannot read maxmemory-policy (CONFIG is disabled, managed Redis?, and INFO does not show it)" +
			where(nodes, unknown) + ": make sure it is noeviction"}
	case len(lax) > 0:
		return CheckResult{CheckEviction, CheckWarn, join(lax) +
			" without maxmemory: nothing is evicted until a maxmemory is set, then records would be; set maxmemory-policy noeviction"}
	}
	return CheckResult{CheckEviction, CheckOK, join(ok)}
}

func checkPersistence(nodes []checkNode) CheckResult {
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
		return CheckResult{CheckPersistence, CheckWarn, "neither AOF nor RDB" + where(nodes, none) +
			": a restart forgets every record, and retries after it run again; enable appendonly yes"}
	case len(unknown) > 0:
		return CheckResult{CheckPersistence, CheckWarn, "CONFIG is disabled (managed Redis?)" + where(nodes, unknown) +
			": AOF is off and the RDB schedule cannot be read; check your provider's persistence settings"}
	case len(failed) > 0:
		return CheckResult{CheckPersistence, CheckWarn, "the last RDB or AOF write failed" + where(nodes, failed) + "; see the Redis log"}
	}
	return CheckResult{CheckPersistence, CheckOK, strings.Join(slices.Compact(slices.Sorted(slices.Values(found))), "; ")}
}

func (s *Store) checkReplication(nodes []checkNode) CheckResult {
	var replicas []string
	lowest, maxLag := -1, 0
	for _, n := range nodes {
		if n.info["role"] == "slave" {
			return CheckResult{CheckReplication, CheckFail, fmt.Sprintf("%s is a replica of %s:%s: writes fail (READONLY); connect to the master",
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
	case s.replicas > lowest:
		return CheckResult{CheckReplication, CheckFail, fmt.Sprintf("%s, but Options.Replicas is %d: every claim fails with ErrNotReplicated",
			msg, s.replicas)}
	case lowest > 0 && s.replicas == 0:
		msg += fmt.Sprintf(" (lag up to %ds); writes are not awaited (Options.Replicas is 0): a failover may lose the latest records", maxLag)
	case lowest > 0:
		msg += fmt.Sprintf(" (lag up to %ds); every write awaits %d", maxLag, s.replicas)
	default:
		msg += ": a failover has nothing to promote; persistence is what keeps the records"
	}
	return CheckResult{CheckReplication, CheckOK, msg}
}

func (s *Store) checkCluster(ctx context.Context, nodes []checkNode) CheckResult {
	enabled := nodes[0].info["cluster_enabled"] == "1"
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		info, err := c.ClusterInfo(ctx).Result()
		if err != nil {
			return CheckResult{CheckCluster, CheckFail, fmt.Sprintf("CLUSTER INFO failed: %v", err)}
		}
		f := parseInfo(info)
		msg := fmt.Sprintf("cluster of %d masters (%s nodes known), state %s, %s of 16384 slots ok",
			len(nodes), f["cluster_known_nodes"], f["cluster_state"], f["cluster_slots_ok"])
		if f["cluster_state"] != "ok" {
			return CheckResult{CheckCluster, CheckFail, msg + ": claims on the slots not served fail"}
		}
		return CheckResult{CheckCluster, CheckOK, msg}
	case *redis.Ring:
		return CheckResult{CheckCluster, CheckWarn, fmt.Sprintf("a Ring of %d shards: while a shard is down its keys go to the others, "+
			"which lack its records, so retries run again; prefer Redis Cluster", len(nodes))}
	case *redis.AutoPipeliner:
		if enabled {
			return checkPipelinedCluster(ctx, c)
		}
		return CheckResult{CheckCluster, CheckWarn, "not a cluster, as far as an auto-pipeliner shows: it hides its client, so " +
			"Check cannot tell a Ring (whose shards lack each other's records when one is down) from a single node; " +
			"the other checks saw one server only"}
	}
	if enabled {
		return CheckResult{CheckCluster, CheckFail, "the server runs in cluster mode, but the store's client is not a cluster client: " +
			"claims of keys on other masters fail (MOVED); use redis.NewClusterClient"}
	}
	return CheckResult{CheckCluster, CheckOK, "not a cluster"}
}

// checkPipelinedCluster checks a cluster reached through an auto-pipeliner,
// which hides its client: Check cannot tell a cluster client's from a
// single-node client's, and sees one node through it. So it asks every
// master, through the pipeliner, about a key in one of its slots: a
// pipeliner that routes by slot gets every answer, one on a single-node
// client gets MOVED.
func checkPipelinedCluster(ctx context.Context, ap *redis.AutoPipeliner) CheckResult {
	info, err := ap.ClusterInfo(ctx).Result()
	if err != nil {
		return CheckResult{CheckCluster, CheckFail, fmt.Sprintf("CLUSTER INFO failed: %v", err)}
	}
	if f := parseInfo(info); f["cluster_state"] != "ok" {
		return CheckResult{CheckCluster, CheckFail, fmt.Sprintf("cluster state %s, %s of 16384 slots ok: claims on the slots not served fail",
			f["cluster_state"], f["cluster_slots_ok"])}
	}
	shards, err := ap.ClusterShards(ctx).Result()
	if err != nil {
		return CheckResult{CheckCluster, CheckFail, fmt.Sprintf("CLUSTER SHARDS failed: %v", err)}
	}
	masters, skipped := 0, 0
	for _, sh := range shards {
		i := slices.IndexFunc(sh.Nodes, func(n redis.Node) bool { return n.Role == "master" })
		if i < 0 || len(sh.Slots) == 0 {
			skipped++
			continue
		}
		masters++
		key, ok := keyIn(sh.Slots)
		if !ok {
			continue
		}
		if err := ap.Exists(ctx, key).Err(); err != nil {
			if _, moved := redis.IsMovedError(err); moved {
				return CheckResult{CheckCluster, CheckFail, "the server runs in cluster mode, but the store's auto-pipeliner is not a " +
					"cluster client's: claims of keys on other masters fail (MOVED); use redis.NewClusterClient(...).AutoPipeline()"}
			}
			n := sh.Nodes[i]
			return CheckResult{CheckCluster, CheckFail, fmt.Sprintf("EXISTS on master %s failed: %v",
				net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)), err)}
		}
	}
	msg := fmt.Sprintf("cluster of %d masters, reached through an auto-pipeliner, which routes by slot", masters)
	if skipped > 0 {
		msg += fmt.Sprintf(" (%d shards without a master or slots)", skipped)
	}
	return CheckResult{CheckCluster, CheckWarn, msg + "; the other checks, in-progress records included, saw one master only: " +
		"to check them all, run Check on a store on the cluster client"}
}

// keyIn returns a key whose hash slot is in one of ranges, if one of the
// first million candidates is (for a range of one slot, all but surely).
func keyIn(ranges []redis.SlotRange) (string, bool) {
	for i := range 1 << 20 {
		key := "idemkey-check-" + strconv.Itoa(i)
		slot := int64(keyslot.Of(key))
		for _, r := range ranges {
			if slot >= r.Start && slot <= r.End {
				return key, true
			}
		}
	}
	return "", false
}

// checkScripts loads every script and runs a claim and its release on a
// throwaway key, without the observer.
func (s *Store) checkScripts(ctx context.Context) CheckResult {
	scripts := []string{lua.Claim, lua.Legacy, lua.Complete, lua.Release, lua.Extend, lua.Checkpoint, lua.Lookup, lua.Watch}
	for _, src := range scripts {
		if err := s.client.ScriptLoad(ctx, src).Err(); err != nil {
			return CheckResult{CheckScripts, CheckFail, fmt.Sprintf("SCRIPT LOAD failed: %v", err)}
		}
	}
	opts := s.Options()
	opts.Observer, opts.ReplayCacheBytes = nil, 0
	quiet, err := New(s.client, opts)
	if err != nil {
		return CheckResult{CheckScripts, CheckFail, err.Error()}
	}
	quiet.env.settled.Store(true) // no start-up check: Check reports the eviction policy itself
	var b [16]byte
	_, _ = rand.Read(b[:])
	start := time.Now()
	c, err := quiet.Claim(ctx, Request{Scope: "idemkey check", Key: hex.EncodeToString(b[:]), Label: "idemkey check"})
	if err != nil {
		return CheckResult{CheckScripts, CheckFail, fmt.Sprintf("%d scripts loaded, but a claim failed: %v", len(scripts), err)}
	}
	if c.Lease == nil {
		return CheckResult{CheckScripts, CheckFail, fmt.Sprintf("%d scripts loaded, but a claim of a new key found %s", len(scripts), c.Status)}
	}
	if err := c.Lease.Release(ctx); err != nil {
		return CheckResult{CheckScripts, CheckFail, fmt.Sprintf("%d scripts loaded and a claim ran, but its release failed: %v", len(scripts), err)}
	}
	return CheckResult{CheckScripts, CheckOK, fmt.Sprintf("%d scripts loaded; a claim and its release ran in %s",
		len(scripts), time.Since(start).Round(time.Microsecond))}
}

func checkLatency(ctx context.Context, n checkNode) CheckResult {
	var rtts []time.Duration
	deadline := time.Now().Add(checkPingTime)
	for range checkPings {
		start := time.Now()
		if err := n.c.Ping(ctx).Err(); err != nil {
			return CheckResult{CheckLatency, CheckFail, fmt.Sprintf("PING failed after %d: %v", len(rtts), err)}
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
		return CheckResult{CheckLatency, CheckWarn, msg + ": slow; a first request costs two round trips, a replay one"}
	}
	return CheckResult{CheckLatency, CheckOK, msg}
}

// globEscaper escapes the characters SCAN's MATCH pattern treats specially.
var globEscaper = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)

// inProgress is what the in-progress check found.
type inProgress struct {
	scanned, records, started, running, lapsed, legacy int
	partial                                            bool
	oldestLapse                                        int64 // ms since the longest-lapsed lease ran out
	oldestLapseKey                                     string
	oldestCreated                                      int64 // Unix ms of the oldest started record's first claim
	oldestKey                                          string
}

func (s *Store) checkInProgress(ctx context.Context, nodes []checkNode) CheckResult {
	var f inProgress
	for _, n := range nodes {
		if err := s.scanNode(ctx, n, &f); err != nil {
			return CheckResult{CheckInProgress, CheckWarn, fmt.Sprintf("SCAN of %s failed: %v", n.addr, err)}
		}
	}
	msg := fmt.Sprintf("%d records under %q", f.records, s.prefix)
	if f.partial {
		msg += fmt.Sprintf(" (a partial count: the scan stopped after about %d keys)", f.scanned)
	}
	if f.legacy > 0 {
		msg += fmt.Sprintf(", %d in the previous format", f.legacy)
	}
	if f.started == 0 {
		return CheckResult{CheckInProgress, CheckOK, msg + ", none in progress"}
	}
	msg += fmt.Sprintf(", %d in progress: %d with a live lease, %d whose lease ran out", f.started, f.running, f.lapsed)
	if f.oldestKey != "" {
		msg += fmt.Sprintf("; oldest started %s ago (%s)", time.Since(time.UnixMilli(f.oldestCreated)).Round(time.Second), f.oldestKey)
	}
	if f.lapsed == 0 {
		return CheckResult{CheckInProgress, CheckOK, msg}
	}
	msg += fmt.Sprintf("; the longest-lapsed lease ran out %s ago (%s). Runs that ended without an outcome left them: "+
		"a retry with the key takes each over; without one they expire with the retention",
		(time.Duration(f.oldestLapse) * time.Millisecond).Round(time.Millisecond), f.oldestLapseKey)
	return CheckResult{CheckInProgress, CheckWarn, msg}
}

// scanNode looks at the records of one node, within the check's budget.
func (s *Store) scanNode(ctx context.Context, n checkNode, f *inProgress) error {
	match := globEscaper.Replace(s.prefix) + "{*}"
	deadline := time.Now().Add(checkScanTime)
	var cursor uint64
	for seen := 0; ; {
		keys, next, err := n.c.Scan(ctx, cursor, match, checkScanCount).Result()
		if err != nil {
			return err
		}
		if err := s.inspectKeys(ctx, n, keys, f); err != nil {
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
func (s *Store) inspectKeys(ctx context.Context, n checkNode, keys []string, f *inProgress) error {
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
	if _, err := p.Exec(ctx); err != nil && !isRedisReply(err) {
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
		if head == "" || head[0] != kindStarted {
			continue
		}
		f.started++
		startedKeys = append(startedKeys, k)
		thr, ok := threshold(head)
		ttl := ttls[i].Val()
		if !ok || ttl < 0 {
			continue
		}
		if left := ttl.Milliseconds() - thr; left > 0 {
			f.running++
		} else {
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
	if _, err := p.Exec(ctx); err != nil && !isRedisReply(err) && !errors.Is(err, redis.Nil) {
		return err
	}
	now := time.Now().UnixMilli()
	for i, k := range startedKeys {
		r, _, ok := parseStarted(values[i].Val())
		if ok && r.createdMS > 0 && r.createdMS <= now && (f.oldestKey == "" || r.createdMS < f.oldestCreated) {
			f.oldestCreated, f.oldestKey = r.createdMS, k
		}
	}
	return nil
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
