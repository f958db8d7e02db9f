// Package lua holds idemkey's Redis scripts as Go strings, embedded from the
// .lua files beside it. Each script is one atomic step on one record and its
// lease; every key it touches comes in through KEYS and shares one hash tag,
// so the scripts run unchanged on a single node and on Redis Cluster.
//
// The scripts are the contract between idemkey and Redis: package redisstore
// runs them with EVALSHA (falling back to EVAL) and decodes their replies.
// The opening comment of each file states its keys, arguments and reply.
package lua

import _ "embed"

// Claim creates a record and its lease, or answers with what the record
// holds: a replay, an in-progress lease, a fingerprint mismatch, or a
// takeover of an attempt whose lease ran out.
//
//go:embed claim.lua
var Claim string

// Complete stores an outcome, if the caller's token still owns the record.
//
//go:embed complete.lua
var Complete string

// Release forgets a started record (or only its lease, when a recovery point
// was recorded), if the caller's token still owns it.
//
//go:embed release.lua
var Release string

// Extend pushes the lease out, if the caller's token still owns the record.
//
//go:embed extend.lua
var Extend string

// Checkpoint records a recovery point and its data and pushes the lease out,
// if the caller's token still owns the record.
//
//go:embed checkpoint.lua
var Checkpoint string

// Lookup reads a record, its TTL and its lease's TTL, for inspection.
//
//go:embed lookup.lua
var Lookup string
