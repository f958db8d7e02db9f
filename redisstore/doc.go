// Package redisstore makes an operation run once per idempotency key, across
// processes, with Redis as the referee.
//
// A caller claims a (scope, key) with a fingerprint of what it is asking for.
// Exactly one concurrent claimer gets a [Lease] and runs the operation; it
// then completes the record with the outcome, which every later claim of the
// same key and fingerprint gets back as a replay. While the owner runs, other
// claims get [ErrInProgress]; a claim with another fingerprint gets
// [ErrMismatch]. If the owner dies, its lease runs out and the next claim
// takes the record over, with the recovery point the owner last checkpointed.
// Every write is fenced by the owner's token: an owner that lost its record to
// a takeover gets [ErrLeaseLost] and changes nothing.
//
// Each step is one Lua script (package lua) run with EVALSHA. A first
// execution costs two round trips (claim, complete) and four Redis commands
// counting those inside the scripts; a replay or a mismatch costs one round
// trip and two commands, an in-progress answer three commands. The record is
// one key named by a hash of the scope and key, so the store works unchanged
// on a single node, Sentinel and Redis Cluster, and no byte a client sends
// shapes a Redis key name.
//
// [Store.Do] wraps the whole flow around a function, for side effects that are
// not HTTP handlers: a worker calling an external API, a queue consumer.
// Packages ginmw and httpmw build the HTTP Idempotency-Key contract on top.
//
// For operators, [Store.Scan] walks the records (state, attempt, label, age,
// lease; never the scope or key, which are not stored) and [Store.Forget]
// removes one, so that its next request runs again; [Store.ForceForget]
// also removes a record whose owner holds a live lease, and fences that
// owner. 'idemkey ls' and 'idemkey forget' are the same from a shell.
//
// # Key layout
//
//	<prefix>{<tag>}      string   the record (layout: package lua), TTL = the retention
//	<prefix>{<tag>}:t    integer  its tombstone, only with Options.TombstoneRetention
//	tag = base64url(first 16 bytes of SHA-256(uvarint(len(scope)) || scope || key)): docs/spec.md
//
// The lease lives inside the record: a takeover needs the lease's deadline to
// have passed on Redis's clock, never just a missing key.
//
// # Redis must not evict, nor forget
//
// A record that Redis evicts, or forgets in a restart without persistence,
// runs again. The store checks maxmemory-policy and persistence on its
// first claim and a minute after each check, logs what may lose records,
// and with Options.RequireNoEviction or RequirePersistence refuses to serve
// ([ErrEvicting], [ErrNoPersistence]). A write that finds its record gone
// fails with [ErrVanished], and the store logs the cause.
//
// # Errors
//
// Each method's doc names the errors it returns, besides wrapped Redis and
// context errors when Redis cannot be reached in time (every method ends by
// its context's deadline: see [New]): sentinels for errors.Is, and typed
// errors carrying data for errors.As (*[InProgressError], *[ExpiredError],
// *[FailedError], *[ReplicationError], *[NameError]), each matching its
// sentinel. [ErrMaxDuration] and [ErrLeaseLost] are also the causes
// (context.Cause) of the cancellations [Lease.Supervise] and Do make.
//
// # A Redis that refuses connections
//
// A refusal is an answer. On one server (a *redis.Client, or an
// auto-pipeliner over one: the start-up check tells), [New] adds a dial
// hook to the client that fails a refused dial at once, not after
// go-redis's dial retries; the store then fails every claim at once,
// wrapping the refusal (errors.Is syscall.ECONNREFUSED), logs it once,
// probes Redis every 50ms, and serves as soon as it answers. Other writes
// (complete, release, heartbeats) keep trying. On a cluster or a Ring, one
// node's refusal says nothing about the others.
package redisstore
