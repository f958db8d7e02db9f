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
// Each step is one Lua script (package lua) run with EVALSHA: a first
// execution costs two round trips (claim, complete); a replay, an in-progress
// answer or a mismatch costs one. The record and its lease share one hash
// tag derived from a hash of the scope and key, so the store works unchanged
// on a single node, Sentinel and Redis Cluster, and no byte a client sends
// shapes a Redis key name.
//
// [Store.Do] wraps the whole flow around a function, for side effects that are
// not HTTP handlers: a worker calling an external API, a queue consumer.
// Packages ginmw and httpmw build the HTTP Idempotency-Key contract on top.
//
// # Key layout
//
//	<prefix>{<tag>}        hash    the record: state, fingerprint, owner token, attempt,
//	                               recovery point and data, outcome code and body, scope, key, label
//	<prefix>{<tag>}:lease  string  the owner's token, with PX = the lease
//	tag = base64url(first 16 bytes of SHA-256(len(scope) || scope || key))
//
// Both keys always carry a TTL: the record its retention, the lease its lease.
//
// # Deadlines
//
// Every method takes a context. go-redis honours its deadline only when the
// client is built with ContextTimeoutEnabled: true; otherwise a hung server
// holds a call for the client's ReadTimeout. Build the client with it.
package redisstore
