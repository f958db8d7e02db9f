// Package walk walks the keys under a store's prefix on every server its
// client reaches, with SCAN (never KEYS), reads each SCAN call's keys in
// pipelines, decodes them and keeps the records its filters select: all
// of redisstore's Store.Scan but its public types.
//
// It knows nothing of package redisstore.
package walk

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

// Sizes of the reads.
const (
	HeadLen     = 512     // bytes of each record read first: all of most started records, a completed one's code
	StartedMax  = 1 << 20 // a started record larger than this is not read whole
	batchValues = 4 << 20 // bytes of whole values one pipeline reads, at most (and one value)

	DefaultCount = 1000 // Options.Count by default (ScanOptions.Count's)
)

// Options says what to walk and read.
type Options struct {
	// Prefix starts the keys to walk.
	Prefix string
	// Count is the COUNT hint of each SCAN call; 0 is DefaultCount.
	Count int
	// Bodies reads completed records whole, not only their head.
	Bodies bool

	// The filters (Store.Scan's ScanOptions): a record passes when it is
	// in State ("started", "released" or "completed"; "" for any), was
	// first claimed more than Older ago, and, with LeaseExpired, is held
	// by nobody. Keys that are not records always pass.
	State        string
	Older        time.Duration
	LeaseExpired bool
}

// Key is one key under the prefix, as read. Keys that went since SCAN
// saw them are not passed on, nor are tombstones and lease keys of
// records in the previous format (Stats counts those).
type Key struct {
	// Name is the key's name; Server the address of the server that
	// holds it.
	Name, Server string
	// Record says the name is a record's (record.NameRecord); otherwise
	// it is not a name idemkey writes.
	Record bool
	// Type is the key's type as TYPE says ("key" when TYPE failed) when
	// it is not a record's name or holds no string; "" for a record's
	// string.
	Type string
	// Value is the record's string: all of it when Whole, else its first
	// HeadLen bytes. Started records up to StartedMax are read whole, and
	// completed ones with Options.Bodies.
	Value string
	Whole bool
	// Size is the string's length.
	Size int64
	// TTL is the key's PTTL as go-redis gives it: -1 without a TTL.
	TTL time.Duration

	// Found is the record decoded (a completed one's Body as read: the
	// head unless Whole), or nil when the key holds none, and Problem
	// then says why (see Decode).
	Found   *record.Found
	Problem string
}

// Stats counts what the walk saw, field for field redisstore's
// ScanSummary (Scan converts one to the other; see there).
type Stats struct {
	Servers, Keys, Records, Matched, NotRecords, Tombstones, Calls int
	SlowestCall                                                    time.Duration
}

// Run walks every server client reaches (check.Servers) and calls fn with
// each key under o.Prefix that is not a record, and each record that
// passes o's filters, decoded, stopping at fn's first error. It returns what
// it counted, so far when it fails: when Redis fails, when ctx ends, or
// for an auto-pipeliner on a cluster, which reaches no master on its own.
func Run(ctx context.Context, client redis.Scripter, o Options, fn func(*Key) error) (Stats, error) {
	var st Stats
	if o.Count == 0 {
		o.Count = DefaultCount
	}
	if ap, ok := client.(*redis.AutoPipeliner); ok {
		info, err := ap.Info(ctx, "cluster").Result()
		if err != nil {
			return st, fmt.Errorf("redisstore: scan: %w", err)
		}
		if strings.Contains(info, "cluster_enabled:1") {
			return st, errors.New("redisstore: scan: an auto-pipeliner on a cluster reaches no master on its own: " +
				"scan through a store on the cluster client")
		}
	}
	servers, err := check.Servers(ctx, client)
	if err != nil {
		return st, fmt.Errorf("redisstore: scan: %w", err)
	}
	w := walker{o: &o, fn: fn, st: &st, now: time.Now()}
	for _, srv := range servers {
		st.Servers++
		if err := w.server(ctx, srv); err != nil {
			return st, err
		}
	}
	return st, nil
}

// walker is one Run.
type walker struct {
	o   *Options
	fn  func(*Key) error
	st  *Stats
	now time.Time // for Options.Older
}

// server walks one server, one SCAN call's keys at a time.
func (w *walker) server(ctx context.Context, srv check.Server) error {
	match := check.EscapeGlob(w.o.Prefix) + "*"
	var cursor uint64
	for {
		start := time.Now()
		keys, next, err := srv.C.Scan(ctx, cursor, match, int64(w.o.Count)).Result()
		w.st.Calls++
		w.st.SlowestCall = max(w.st.SlowestCall, time.Since(start))
		if err != nil {
			return fmt.Errorf("redisstore: scan of %s: %w", srv.Addr, err)
		}
		w.st.Keys += len(keys)
		if err := w.batch(ctx, srv, keys); err != nil {
			return err
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// probe is what is read of one key.
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
func (w *walker) batch(ctx context.Context, srv check.Server, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	probes := make([]probe, 0, len(keys))
	p := srv.C.Pipeline()
	for _, name := range keys {
		kind, _ := record.NameKind(w.o.Prefix, name)
		pr := probe{name: name, kind: kind}
		switch kind {
		case record.NameTombstone, record.NameLegacyLease:
			w.st.Tombstones++
			continue
		case record.NameRecord:
			pr.head = p.GetRange(ctx, name, 0, HeadLen-1)
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
	if err := w.readMore(ctx, srv, probes); err != nil {
		return err
	}
	for i := range probes {
		if k, ok := probes[i].key(srv); ok {
			if err := w.pass(&k); err != nil {
				return err
			}
		}
	}
	return nil
}

// readMore reads what the heads did not tell: the type of a record's key
// that holds no string, and the whole value of started records longer
// than their head (and, with Bodies, of completed ones), in pipelines of
// at most batchValues bytes.
func (w *walker) readMore(ctx context.Context, srv check.Server, probes []probe) error {
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
		if size <= int64(len(head)) || !(head[0] == record.KindStarted && size <= StartedMax ||
			head[0] == record.KindCompleted && w.o.Bodies) {
			continue
		}
		if queued > 0 && bytes+size > batchValues {
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

// key is what pr read, or false when the key went since SCAN saw it.
func (pr *probe) key(srv check.Server) (Key, bool) {
	k := Key{Name: pr.name, Server: srv.Addr, Record: pr.kind == record.NameRecord}
	if pr.typ != nil || !k.Record {
		k.Type = typeName(pr.typ)
		return k, k.Type != "none"
	}
	k.Value, k.Size, k.TTL = pr.head.Val(), pr.size.Val(), pr.ttl.Val()
	k.Whole = k.Size <= int64(len(k.Value))
	if pr.whole != nil {
		v, err := pr.whole.Result()
		if err != nil {
			return k, false // gone since, or changed type: as good as gone
		}
		k.Value, k.Whole = v, true
	}
	return k, k.TTL != -2 // -2: no key
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
