// Package lua holds idemkey's Redis scripts as Go strings, embedded from the
// .lua files beside it. Each script is one atomic step on one record and its
// lease; every key it touches comes in through KEYS and shares one hash tag,
// so the scripts run unchanged on a single node and on Redis Cluster.
//
// The scripts are the contract between idemkey and Redis: package redisstore
// runs them with EVALSHA, falling back to EVAL (redisstore/internal/script),
// and decodes their replies (redisstore/internal/record).
// The opening comment of each file states its keys, arguments and reply.
//
// # The record
//
// docs/spec.md specifies all of it (Spec 1.0: the keys, every byte of the
// record, the tombstone, each script's arguments and replies), with golden
// vectors in testdata/spec: a change to any of it is a change of the format,
// which its section 2 says how to make.
//
// A record is one Redis string at <prefix>{<tag>}, in one of two layouts.
// Positions count from 1, as Lua's string.sub does (package
// redisstore/internal/record holds the same table 0-based):
//
//	pos     field       started record                     completed record
//	1       kind        'S'                                'C'
//	2       flags       '-'; 'w': another process waits    '-'
//	                    for the outcome (watch.lua); 'r':
//	                    released, no owner
//	3-18    fp          16 bytes: the request's fingerprint (as stored; see redisstore.Request)
//	19-26   token       8 bytes: the owner's fencing token  -
//	27-     (started)   <attempt>:<threshold>:<rp><rpd><label><created>
//	19-     (completed) <attempt>:<code>:<outcome>
//
// Numbers are decimal ASCII (the code may be negative). rp, rpd and label
// are netstrings (<length>:<bytes>):
// the recovery point, its data and the label; created is the first claim's
// time in Unix milliseconds. The outcome is the stored bytes, to the end.
//
// The lease lives in the record: a started record's TTL is reset to the
// retention by every claim, heartbeat and checkpoint, and the lease is held
// while its PTTL stays above the threshold (retention minus lease). The
// lease's clock is Redis's own expiry clock, and the lease cannot go missing
// on its own: a takeover needs the deadline to have passed. Completion
// keeps the TTL (KEEPTTL), so the outcome lives about the retention.
//
// A process that waits for another's outcome subscribes to the record's
// wake-up channel, <prefix>{<tag>}:w, and marks the record (watch.lua);
// complete and release publish on it only when the mark is there, so
// waiting costs nothing when nobody waits.
//
// A tombstone, kept only when the store is configured for it, is an integer
// at <prefix>{<tag>}:t: fp32*2^18 + code*2^8 + min(attempt, 255), with fp32
// the first 4 bytes of fp.
package lua

import _ "embed"

// Claim creates a record and its lease, or answers with what the record
// holds: a replay, an in-progress lease, a fingerprint mismatch, or a
// takeover of an attempt whose lease ran out.
//
//go:embed claim.lua
var Claim string

// Legacy claims a record written in the previous format (a hash and a
// separate lease key), which Claim answers with status 5.
//
//go:embed legacy.lua
var Legacy string

// Complete stores an outcome, if the caller's token still owns the record.
//
//go:embed complete.lua
var Complete string

// Release forgets a started record, or ends only its lease when the record
// has history (a takeover, a recovery point), if the caller's token still
// owns it.
//
//go:embed release.lua
var Release string

// Extend pushes the lease out, if the caller's token still owns the record.
//
//go:embed extend.lua
var Extend string

// Checkpoint records a recovery point and its data and pushes the lease out
// (or, past MaxDuration, keeps the record's TTL), if the caller's token
// still owns the record.
//
//go:embed checkpoint.lua
var Checkpoint string

// Watch marks a running record as waited for, so that its completion or
// release publishes on the record's wake-up channel.
//
//go:embed watch.lua
var Watch string

// Lookup reads a record, its type and its TTL, for inspection.
//
//go:embed lookup.lua
var Lookup string

// Forget removes a record and its tombstone, for operators: it refuses a
// record whose lease is live unless forced, and a forced forget fences the
// owner, whose later writes find no record of theirs.
//
//go:embed forget.lua
var Forget string
