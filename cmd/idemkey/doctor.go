package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/redisstore"
)

const doctorAbout = `Checks a Redis for use as an idempotency store and prints one line per
check, ok, warn or fail (redisstore.Store.Check runs the same checks from Go):

  version           the server's version: idemkey's scripts need 7.0 or newer
  maxmemory-policy  fails when Redis may evict (any policy but noeviction, with
                    maxmemory set): a retry whose record was evicted runs again
  persistence       warns with neither AOF nor RDB: a restart forgets every record
  replication       the role, the replicas online, and --replicas
  cluster           cluster mode and state (a cluster is checked master by master)
  scripts           loads the scripts, runs a claim and its release on a throwaway key
  latency           round-trip p50 and p99 over 300 PINGs
  in-progress       the records under --prefix still in progress, and those whose
                    lease ran out (runs that ended without an outcome); SCANs at
                    most 100,000 keys per master

Then it lists the oldest stuck records (nobody holds them: their lease ran
out, or was given back), up to 5, each with the 'idemkey forget --name' line
that clears it (without the URL's credentials), in a scan of at most 10s.

Where CONFIG is disabled (managed Redis), the checks read what INFO shows and
warn about what they cannot tell. Redis comes from --redis (a redis:// or
rediss:// URL, or host:port), else $REDIS_URL, else redis://127.0.0.1:6379/0.

Exit status: 0 when no check fails (warnings allowed), 1 when a check fails,
2 when Redis cannot be reached or on a usage error.
`

// doctorReport is doctor's --json output.
type doctorReport struct {
	Redis    string                   `json:"redis"`
	Prefix   string                   `json:"prefix"`
	Checks   []redisstore.CheckResult `json:"checks,omitempty"`
	Failed   int                      `json:"failed"`
	Warnings int                      `json:"warnings"`
	Error    string                   `json:"error,omitempty"`
	Stuck    *stuckReport             `json:"stuck,omitempty"`
}

func doctor(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("doctor", "[--redis URL] [--prefix idem:] [--replicas N] [--json]", doctorAbout, stderr)
	var (
		redisURL = redisFlag(fs, "Redis `URL` (redis://host:port/db or host:port); default $REDIS_URL, else redis://127.0.0.1:6379/0")
		prefix   = fs.String("prefix", "idem:", "the store's key prefix (redisstore.Options.Prefix)")
		replicas = fs.Int("replicas", 0, "the store's redisstore.Options.Replicas, checked against the replicas online")
		asJSON   = fs.Bool("json", false, "print the report as one JSON object")
	)
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "doctor", "unexpected argument %q", fs.Arg(0))
	}
	if *replicas < 0 {
		return usageError(stderr, "doctor", "--replicas must not be negative")
	}
	url := redisURL()
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	if !strings.Contains(url, "://") {
		url = "redis://" + url // host:port
	}
	redis.SetLogger(quietRedisLog{}) // a failure to connect is reported once, below
	rep := doctorReport{Redis: redactURL(url), Prefix: *prefix}
	if o, err := redisOptions(url); err == nil {
		rep.Redis = optionsName(o) // as when connected
	}
	unreachable := func(err error) int {
		fmt.Fprintf(stderr, "idemkey doctor: %v\n", err)
		if *asJSON {
			rep.Error = err.Error()
			_ = json.NewEncoder(stdout).Encode(rep)
		}
		return 2
	}

	rdb, err := connect(ctx, url)
	if err != nil {
		return unreachable(err)
	}
	defer rdb.Close()
	client, err := clusterAware(ctx, rdb)
	if err != nil {
		return unreachable(err)
	}
	if client != redis.UniversalClient(rdb) {
		defer client.Close()
	}
	store, err := redisstore.New(client, redisstore.Options{Prefix: *prefix, Replicas: *replicas})
	if err != nil {
		return usageError(stderr, "doctor", "%v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rep.Checks, err = store.Check(cctx)
	if err != nil {
		return unreachable(err)
	}
	rep.Stuck = findStuck(cctx, store, url, *prefix)
	for _, r := range rep.Checks {
		switch r.Status {
		case redisstore.CheckFail:
			rep.Failed++
		case redisstore.CheckWarn:
			rep.Warnings++
		}
	}
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(rep); err != nil {
			fmt.Fprintf(stderr, "idemkey doctor: %v\n", err)
		}
	} else {
		fmt.Fprintf(stdout, "redis %s, prefix %q\n", rep.Redis, rep.Prefix)
		for _, r := range rep.Checks {
			fmt.Fprintf(stdout, "%-5s %-17s %s\n", r.Status, r.Name, r.Message)
		}
		rep.Stuck.writeText(stdout)
		plural := "s"
		if rep.Warnings == 1 {
			plural = ""
		}
		fmt.Fprintf(stdout, "%d failed, %d warning%s\n", rep.Failed, rep.Warnings, plural)
	}
	if rep.Failed > 0 {
		return 1
	}
	return 0
}

// clusterAware returns rdb, or a cluster client seeded with its address
// when the server runs in cluster mode, so that doctor checks every master.
func clusterAware(ctx context.Context, rdb *redis.Client) (redis.UniversalClient, error) {
	info, err := rdb.Info(ctx, "cluster").Result()
	if err != nil || !strings.Contains(info, "cluster_enabled:1") {
		return rdb, nil // not a cluster, or INFO is disabled: Check says what it can
	}
	o := rdb.Options()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{o.Addr}, Username: o.Username, Password: o.Password,
		TLSConfig: o.TLSConfig, ContextTimeoutEnabled: true})
	if err := cc.Ping(ctx).Err(); err != nil {
		_ = cc.Close()
		return nil, scrubbed(fmt.Errorf("redis cluster at %s: %w", addrName(o.Addr), err), o)
	}
	return cc, nil
}

// checkAtStart runs the store's checks and prints every finding that is not
// ok, for serve.
func checkAtStart(ctx context.Context, store *redisstore.Store, stderr io.Writer) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	results, err := store.Check(cctx)
	if err != nil {
		fmt.Fprintf(stderr, "idemkey serve: redis checks: %v\n", err)
		return
	}
	for _, r := range results {
		if r.Status != redisstore.CheckOK {
			fmt.Fprintf(stderr, "idemkey serve: redis check: %s %s: %s (see 'idemkey doctor')\n", r.Status, r.Name, r.Message)
		}
	}
}
