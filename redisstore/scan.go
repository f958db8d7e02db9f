package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/redisstore/internal/check"
	"github.com/idemkey/idemkey/redisstore/internal/record"
	"github.com/idemkey/idemkey/redisstore/internal/script"
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

// Sizes of Scan's reads.
const (
	scanCount       = 1000    // SCAN's COUNT by default
	scanHeadLen     = 512     // bytes of each record read first: all of most started records, a completed one's code
	scanStartedMax  = 1 << 20 // a started record larger than this is not read whole
	scanBatchValues = 4 << 20 // bytes of whole values one pipeline reads, at most (and one value)
)

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
	if ap, ok := s.client.(*redis.AutoPipeliner); ok {
		info, err := ap.Info(ctx, "cluster").Result()
		if err != nil {
			return sum, fmt.Errorf("redisstore: scan: %w", err)
		}
		if strings.Contains(info, "cluster_enabled:1") {
			return sum, errors.New("redisstore: scan: an auto-pipeliner on a cluster reaches no master on its own: " +
				"scan through a store on the cluster client")
		}
	}
	servers, err := check.Servers(ctx, s.client)
	if err != nil {
		return sum, fmt.Errorf("redisstore: scan: %w", err)
	}
	sc := scanner{s: s, opts: &opts, fn: fn, sum: &sum, now: time.Now()}
	for _, srv := range servers {
		sum.Servers++
		if err := sc.server(ctx, srv); err != nil {
			return sum, err
		}
	}
	return sum, nil
}

// scanner is one Scan.
type scanner struct {
	s    *Store
	opts *ScanOptions
	fn   func(*Scanned) error
	sum  *ScanSummary
	now  time.Time
}

// server scans one server, one SCAN call's keys at a time.
func (sc *scanner) server(ctx context.Context, srv check.Server) error {
	match := check.EscapeGlob(sc.s.opts.Prefix) + "*"
	var cursor uint64
	for {
		start := time.Now()
		keys, next, err := srv.C.Scan(ctx, cursor, match, int64(sc.opts.Count)).Result()
		sc.sum.Calls++
		sc.sum.SlowestCall = max(sc.sum.SlowestCall, time.Since(start))
		if err != nil {
			return fmt.Errorf("redisstore: scan of %s: %w", srv.Addr, err)
		}
		sc.sum.Keys += len(keys)
		if err := sc.batch(ctx, srv, keys); err != nil {
			return err
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// probe is what Scan reads of one key.
type probe struct {
	name  string
	kind  int // record.NameKind's
	head  *redis.StringCmd
	ttl   *redis.DurationCmd
	size  *redis.IntCmd
	typ   *redis.StatusCmd // for keys that are not a record's string
	whole *redis.StringCmd // the whole value, when the head is not enough
}

// batch reads and passes on the keys of one SCAN call.
func (sc *scanner) batch(ctx context.Context, srv check.Server, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	probes := make([]probe, 0, len(keys))
	p := srv.C.Pipeline()
	for _, name := range keys {
		kind, _ := record.NameKind(sc.s.opts.Prefix, name)
		pr := probe{name: name, kind: kind}
		switch kind {
		case record.NameTombstone, record.NameLegacyLease:
			sc.sum.Tombstones++
			continue
		case record.NameRecord:
			pr.head = p.GetRange(ctx, name, 0, scanHeadLen-1)
			pr.ttl = p.PTTL(ctx, name)
			pr.size = p.StrLen(ctx, name)
		default:
			pr.typ = p.Type(ctx, name)
		}
		probes = append(probes, pr)
	}
	if err := execPipeline(ctx, p, srv); err != nil {
		return err
	}
	if err := sc.readMore(ctx, srv, probes); err != nil {
		return err
	}
	for i := range probes {
		if err := sc.pass(&probes[i], srv); err != nil {
			return err
		}
	}
	return nil
}

// readMore reads what the heads did not tell: the type of a record's key
// that holds no string, and the whole value of started records longer
// than their head (and, with Bodies, of completed ones), in pipelines of
// at most scanBatchValues bytes.
func (sc *scanner) readMore(ctx context.Context, srv check.Server, probes []probe) error {
	p, bytes, queued := srv.C.Pipeline(), int64(0), 0
	flush := func() error {
		if queued == 0 {
			return nil
		}
		err := execPipeline(ctx, p, srv)
		p, bytes, queued = srv.C.Pipeline(), 0, 0
		return err
	}
	for i := range probes {
		pr := &probes[i]
		if pr.head == nil {
			continue
		}
		head, err := pr.head.Result()
		switch {
		case err != nil:
			pr.typ = p.Type(ctx, pr.name)
			queued++
			continue
		case head == "":
			continue
		}
		size := pr.size.Val()
		if size <= int64(len(head)) || !(head[0] == record.KindStarted && size <= scanStartedMax ||
			head[0] == record.KindCompleted && sc.opts.Bodies) {
			continue
		}
		if queued > 0 && bytes+size > scanBatchValues {
			if err := flush(); err != nil {
				return err
			}
		}
		pr.whole = p.Get(ctx, pr.name)
		bytes += size
		queued++
	}
	return flush()
}

// execPipeline runs p; a command's own error reply (WRONGTYPE, a key gone)
// is that command's, and not the pipeline's.
func execPipeline(ctx context.Context, p redis.Pipeliner, srv check.Server) error {
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !script.IsFinal(err) {
		return fmt.Errorf("redisstore: scan of %s: %w", srv.Addr, err)
	}
	return nil
}

// pass decodes one probed key and hands it to fn if it is kept.
func (sc *scanner) pass(pr *probe, srv check.Server) error {
	out := Scanned{Name: pr.name, Server: srv.Addr}
	switch {
	case pr.typ != nil && typeName(pr.typ) == "none":
		return nil // gone since SCAN saw it
	case pr.kind != record.NameRecord:
		out.Problem = fmt.Sprintf("not a key name idemkey writes (a %s)", typeName(pr.typ))
	case pr.typ != nil:
		if t := typeName(pr.typ); t == "hash" {
			out.Problem = "a record in the format of idemkey before 0.2, which expires with its retention"
		} else {
			out.Problem = fmt.Sprintf("a %s, not an idemkey record", t)
		}
	default:
		rec, problem, gone := sc.decode(pr)
		if gone {
			return nil
		}
		out.Record, out.Problem = rec, problem
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

// decode decodes a record's probe: the record, or why it is not one, or
// gone when the key went since SCAN saw it.
func (sc *scanner) decode(pr *probe) (rec *Record, problem string, gone bool) {
	v, whole := pr.head.Val(), pr.size.Val() <= int64(len(pr.head.Val()))
	if pr.whole != nil {
		w, err := pr.whole.Result()
		if err != nil {
			return nil, "", true // gone since, or changed type: as good as gone
		}
		v, whole = w, true
	}
	ttl := pr.ttl.Val() // -1 (no TTL) and -2 (no key) come as they are, in nanoseconds
	switch {
	case ttl == -2:
		return nil, "", true
	case v == "":
		return nil, "an empty string, not an idemkey record", false
	case ttl > 0:
		ttl /= time.Millisecond
	}
	rec, err := found([]any{int64(ttl), "string", v})
	switch {
	case err != nil && v[0] == record.KindStarted && !whole:
		return nil, fmt.Sprintf("a started record of %d bytes, more than Scan reads (%d)", pr.size.Val(), scanStartedMax), false
	case err != nil:
		return nil, "a string that is not an idemkey record", false
	}
	if rec.Response != nil && (!sc.opts.Bodies || !whole) {
		rec.Response.Body = nil
	}
	return rec, "", false
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

// typeName is the type a TYPE command answered, or "key" if it failed.
func typeName(c *redis.StatusCmd) string {
	if c == nil {
		return "key"
	}
	if t, err := c.Result(); err == nil && t != "" {
		return t
	}
	return "key"
}
