package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/idemkey/idemkey/redisstore/internal/check"
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

// CheckResult is the result of one check.
type CheckResult struct {
	// Name is the check's name: "version", "maxmemory-policy",
	// "persistence", "replication", "cluster", "scripts", "latency" or
	// "in-progress".
	Name string `json:"name"`
	// Status is ok, warn or fail.
	Status CheckStatus `json:"status"`
	// Message says, in one line, what the check found and, for warn and
	// fail, what to do.
	Message string `json:"message"`
}

// Check checks the Redis deployment the store runs on for use as an
// idempotency store, as 'idemkey doctor' does, and returns one result per
// check, in this order: the server version ("version": 7.0 or newer);
// "maxmemory-policy" (fail when Redis may evict: an evicted record runs
// again); "persistence" (warn with neither AOF nor RDB); "replication"
// (fail on a replica, or with fewer replicas than Options.Replicas); the
// "cluster" (fail when its state is not ok, or a cluster is reached through
// a single-node client); "scripts": loading the scripts and running a claim
// and its release on a throwaway key; the round-trip "latency"; and the
// records under the prefix still "in-progress" (warn about those whose
// lease ran out: runs that ended without an outcome, waiting for a retry to
// take them over).
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
	t := check.Target{Client: s.client, Prefix: s.opts.Prefix, Replicas: s.opts.Replicas, Scripts: s.checkScripts}
	rs, err := t.Run(ctx)
	if err != nil {
		return nil, err
	}
	return checkResults(rs), nil
}

// checkScripts loads every script and runs a claim and its release on a
// throwaway key, without the observer.
func (s *Store) checkScripts(ctx context.Context) check.Result {
	scripts := [...]string{claimScript.Source, legacyScript.Source, completeScript.Source, releaseScript.Source,
		extendScript.Source, checkpointScript.Source, lookupScript.Source, watchScript.Source, forgetScript.Source}
	result := func(st check.Status, format string, args ...any) check.Result {
		return check.Result{Name: check.Scripts, Status: st, Message: fmt.Sprintf(format, args...)}
	}
	for _, src := range scripts {
		if err := s.client.ScriptLoad(ctx, src).Err(); err != nil {
			return result(check.Fail, "SCRIPT LOAD failed: %v", err)
		}
	}
	opts := s.opts
	opts.Observer, opts.ReplayCacheBytes = nil, 0
	quiet, err := New(s.client, opts)
	if err != nil {
		return result(check.Fail, "%s", err)
	}
	quiet.env.Settle() // no start-up check: Check reports the eviction policy itself
	var b [16]byte
	_, _ = rand.Read(b[:])
	start := time.Now()
	c, err := quiet.Claim(ctx, Request{Scope: "idemkey check", Key: hex.EncodeToString(b[:]), Label: "idemkey check"})
	if err != nil {
		return result(check.Fail, "%d scripts loaded, but a claim failed: %v", len(scripts), err)
	}
	if c.Lease == nil {
		return result(check.Fail, "%d scripts loaded, but a claim of a new key found %s", len(scripts), c.Status)
	}
	if err := c.Lease.Release(ctx); err != nil {
		return result(check.Fail, "%d scripts loaded and a claim ran, but its release failed: %v", len(scripts), err)
	}
	return result(check.OK, "%d scripts loaded; a claim and its release ran in %s", len(scripts), time.Since(start).Round(time.Microsecond))
}
