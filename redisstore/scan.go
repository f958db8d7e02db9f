package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkey/idemkey/redisstore/internal/walk"
)

// ScanOptions selects what [Store.Scan] passes on. The zero value passes
// every record.
type ScanOptions struct {
	// State keeps only the records in this state: Started, Released or
	// Completed. Default: "" (every state).
	State State

	// Older keeps only the records first claimed more than this long ago
	// (Record.CreatedAt, by the claiming process's clock): started and
	// released ones, as a completed record keeps no time. Default: 0 (any
	// age).
	Older time.Duration

	// LeaseExpired keeps only the records nobody holds: started records
	// whose lease ran out (by the record's TTL), and released ones. These
	// are runs that ended without an outcome, waiting for a retry to take
	// them over. Default: false.
	LeaseExpired bool

	// Bodies reads each completed record's outcome into
	// Record.Response.Body. Default: false (Response has the Code, and a
	// nil Body).
	Bodies bool

	// Count is the COUNT hint of each SCAN call: about how many keys one
	// call looks at, and so how long it holds Redis and how many records
	// Scan holds at once. Default: 1000.
	Count int
}

// Scanned is one key [Store.Scan] found under the store's prefix.
type Scanned struct {
	// Name is the key's name in Redis, such as "idem:{9Rd1...}". A
	// record's name is a hash of its scope and key, which Scan cannot
	// undo: neither is stored.
	Name string
	// Server is the address of the Redis server that holds it: on a
	// cluster, its master.
	Server string
	// Record is the record, when the key holds one. Its Scope and Key are
	// empty (not stored); a completed record's Response.Body is nil unless
	// ScanOptions.Bodies. Nil when the key is not an idemkey record.
	Record *Record
	// Problem says why the key is not an idemkey record (another
	// application's key, another type, corrupt bytes, the format before
	// 0.2); "" when it is one.
	Problem string
}

// ScanSummary counts what [Store.Scan] saw.
type ScanSummary struct {
	// Servers is how many servers it scanned: every master of a cluster.
	Servers int
	// Keys is how many keys under the prefix SCAN returned.
	Keys int
	// Records is how many of them were idemkey records.
	Records int
	// Matched is how many records passed the filters and went to fn.
	Matched int
	// NotRecords is how many keys under the prefix were not idemkey
	// records. Each went to fn, with its Problem.
	NotRecords int
	// Tombstones is how many tombstones (and lease keys of records in the
	// format before 0.2) it passed over.
	Tombstones int
	// Calls is how many SCAN calls it made.
	Calls int
	// SlowestCall is the longest SCAN call, its round trip included: an
	// upper bound of how long one call held Redis.
	SlowestCall time.Duration
}

// Scan walks every key under the store's prefix with SCAN (never KEYS),
// on every master of a cluster and every shard of a Ring, and calls fn
// with each record that passes opts's filters and with each key that is
// not an idemkey record (Scanned.Problem says why: Scan goes on past it).
// It reads each SCAN call's keys in one pipelined round trip (a few
// hundred bytes of each; started records whole, and completed ones whole
// only with opts.Bodies) and holds no more than one call's keys at a time,
// so it runs in bounded memory however many records there are. Each SCAN
// call looks at about opts.Count keys: Redis serves other clients between
// calls.
//
// SCAN guarantees every key that exists for the whole scan is seen, at
// least once (one may be seen twice); a record created or removed
// meanwhile may or may not be. If fn returns an error, Scan stops and
// returns it. Scan returns, with what it counted so far, an error when
// Redis fails, when ctx ends, for an invalid opts (ErrInvalidRequest), or
// when the store's client cannot reach each server on its own: an
// auto-pipeliner on a cluster (scan through a store on the cluster client
// instead). It writes nothing; the Observer sees none of it. It is safe for
// concurrent use.
func (s *Store) Scan(ctx context.Context, opts ScanOptions, fn func(*Scanned) error) (ScanSummary, error) {
	o := walk.Options{Prefix: s.opts.Prefix, Count: opts.Count, Bodies: opts.Bodies,
		State: string(opts.State), Older: opts.Older, LeaseExpired: opts.LeaseExpired}
	if p := o.Problem(); p != "" {
		return ScanSummary{}, fmt.Errorf("%w: scan: %s", ErrInvalidRequest, p)
	}
	st, err := walk.Run(ctx, s.client, o, func(k *walk.Key) error { return fn(scanned(k, opts.Bodies)) })
	return ScanSummary(st), err
}
