package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkey/idemkey/redisstore/internal/record"
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

// scanCount is SCAN's COUNT by default.
const scanCount = 1000

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
	var sum ScanSummary
	switch {
	case opts.State != "" && opts.State != Started && opts.State != Released && opts.State != Completed:
		return sum, fmt.Errorf("%w: scan: state %q is not started, released or completed", ErrInvalidRequest, opts.State)
	case opts.Older < 0 || opts.Count < 0:
		return sum, fmt.Errorf("%w: scan: negative Older or Count", ErrInvalidRequest)
	}
	if opts.Count == 0 {
		opts.Count = scanCount
	}
	sc := scanner{opts: &opts, fn: fn, sum: &sum, now: time.Now()}
	st, err := walk.Run(ctx, s.client, walk.Options{Prefix: s.opts.Prefix, Count: opts.Count, Bodies: opts.Bodies}, sc.pass)
	sum.Servers, sum.Keys, sum.Tombstones, sum.Calls, sum.SlowestCall = st.Servers, st.Keys, st.Tombstones, st.Calls, st.SlowestCall
	return sum, err
}

// scanner is one Scan.
type scanner struct {
	opts *ScanOptions
	fn   func(*Scanned) error
	sum  *ScanSummary
	now  time.Time
}

// pass decodes one key and hands it to fn if it is kept.
func (sc *scanner) pass(k *walk.Key) error {
	out := Scanned{Name: k.Name, Server: k.Server}
	switch {
	case !k.Record:
		out.Problem = fmt.Sprintf("not a key name idemkey writes (a %s)", k.Type)
	case k.Type == "hash":
		out.Problem = "a record in the format of idemkey before 0.2, which expires with its retention"
	case k.Type != "":
		out.Problem = fmt.Sprintf("a %s, not an idemkey record", k.Type)
	default:
		out.Record, out.Problem = sc.decode(k)
	}
	if out.Record == nil {
		sc.sum.NotRecords++
		return sc.fn(&out)
	}
	sc.sum.Records++
	if !sc.keep(out.Record) {
		return nil
	}
	sc.sum.Matched++
	return sc.fn(&out)
}

// decode decodes a record's string: the record, or why it is not one.
func (sc *scanner) decode(k *walk.Key) (rec *Record, problem string) {
	ttl := k.TTL // -1 (no TTL) comes as it is, in nanoseconds
	switch {
	case k.Value == "":
		return nil, "an empty string, not an idemkey record"
	case ttl > 0:
		ttl /= time.Millisecond
	}
	rec, err := found([]any{int64(ttl), "string", k.Value})
	switch {
	case err != nil && k.Value[0] == record.KindStarted && !k.Whole:
		return nil, fmt.Sprintf("a started record of %d bytes, more than Scan reads (%d)", k.Size, walk.StartedMax)
	case err != nil:
		return nil, "a string that is not an idemkey record"
	}
	if rec.Response != nil && (!sc.opts.Bodies || !k.Whole) {
		rec.Response.Body = nil
	}
	return rec, ""
}

// keep applies the filters.
func (sc *scanner) keep(r *Record) bool {
	o := sc.opts
	switch {
	case o.State != "" && r.State != o.State:
		return false
	case o.LeaseExpired && (r.State == Completed || r.LeaseTTL > 0):
		return false
	case o.Older > 0 && (r.CreatedAt.IsZero() || sc.now.Sub(r.CreatedAt) <= o.Older):
		return false
	}
	return true
}
