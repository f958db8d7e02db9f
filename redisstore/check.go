package redisstore

import (
	"context"
	"fmt"

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
	t := check.Target{Client: s.client, Prefix: s.opts.Prefix, Replicas: s.opts.Replicas, Claim: s.checkClaim,
		Sources: []string{claimScript.Source, legacyScript.Source, completeScript.Source, releaseScript.Source,
			extendScript.Source, checkpointScript.Source, lookupScript.Source, watchScript.Source, forgetScript.Source}}
	rs, err := t.Run(ctx)
	if err != nil {
		return nil, err
	}
	return checkResults(rs), nil
}

// checkClaim claims key for the scripts check, on a store like s without
// its observer, its replay cache or its start-up check (Check reports the
// eviction policy itself).
func (s *Store) checkClaim(ctx context.Context, key string) (release func(context.Context) error, err error) {
	opts := s.opts
	opts.Observer, opts.ReplayCacheBytes, opts.RequireNoEviction, opts.RequirePersistence, opts.NoStartupCheck = nil, 0, false, false, true
	quiet, err := New(s.client, opts)
	if err != nil {
		return nil, err
	}
	c, err := quiet.Claim(ctx, Request{Scope: "idemkey check", Key: key, Label: "idemkey check"})
	switch {
	case err != nil:
		return nil, err
	case c.Lease == nil:
		return nil, fmt.Errorf("the new key was %s", c.Status)
	}
	return c.Lease.Release, nil
}
