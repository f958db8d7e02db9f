// Package footprint measures what a completed record costs in Redis memory:
// records written by the real middleware (httpmw) and store (redisstore),
// for the generated bodies of package corpus, stored raw, compressed, and
// compressed with a dictionary trained on other bodies of the same kind;
// and what a tombstone costs.
//
// Measure needs a Redis of its own or shared: it writes its keys under a
// prefix of its own, as long as the default one ("idem:", so that key names
// cost what they do in production), and deletes them when done. Its
// used-memory figures are only meaningful on a Redis nothing else writes to
// meanwhile.
package footprint

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/internal/corpus"
	"github.com/idemkey/idemkey/internal/zdict"
	"github.com/idemkey/idemkey/redisstore"
)

// Options tune Measure. The zero value gives the defaults.
type Options struct {
	// Records is how many records each row writes and measures.
	// Default: 500.
	Records int
	// TrainSamples is how many bodies of another seed each dictionary is
	// trained on. Default: 1000.
	TrainSamples int
	// DictSize is the dictionaries' size. Default: zdict.DefaultSize.
	DictSize int
	// Kinds are the corpora to measure. Default: corpus.Kinds().
	Kinds []corpus.Kind
}

// jsonType is the Content-Type Gin's c.JSON sends.
const jsonType = "application/json; charset=utf-8"

// Modes are how a row stores its responses.
const (
	Raw        = "raw"
	Compressed = "zstd"
	Dictionary = "zstd+dict"
)

// Row is what one corpus costs stored one way, as averages per record.
type Row struct {
	Corpus  string
	Mode    string // Raw, Compressed or Dictionary
	Records int
	// Body is the response body; Stored the record's string (STRLEN):
	// record header, status, stored headers and body.
	Body, Stored float64
	// Usage is MEMORY USAGE <record> SAMPLES 0: the key, the value and
	// their allocations, and the keyspace entry.
	Usage float64
	// UsedMemory is the growth of INFO used_memory per record: Usage plus
	// the record's share of the keyspace and expiry tables.
	UsedMemory float64
	// Slack is the allocator's rounding of the value's allocation up to its
	// size class (jemalloc), in Usage.
	Slack float64
}

// Fixed is the per-record overhead of a raw row: MEMORY USAGE minus the
// body and the allocator slack (the stored headers count as overhead).
func (r Row) Fixed() float64 { return r.Usage - r.Body - r.Slack }

// Target is the bound for a record of this body: 0.5 x body + 150 B.
func (r Row) Target() float64 { return 0.5*r.Body + 150 }

// Tombstone is what one tombstone costs.
type Tombstone struct {
	Usage      float64 // MEMORY USAGE of the tombstone key
	UsedMemory float64 // INFO used_memory per tombstone: what records cost more with tombstones than without
}

// Report is the result of Measure.
type Report struct {
	Rows []Row
	// Bench are raw rows with the bench app's blob route: bodies of 'x' and
	// the headers Content-Type: application/octet-stream and Location:
	// /v1/blobs/1, comparable with bench/RESULTS.md.
	Bench     []Row
	Tombstone Tombstone
	DictSize  int
	Redis     string // the server's version
}

// Measure writes records through httpmw and redisstore on rdb and measures
// them. See the package doc for what it writes.
func Measure(ctx context.Context, rdb *redis.Client, o Options) (*Report, error) {
	if o.Records == 0 {
		o.Records = 500
	}
	if o.TrainSamples == 0 {
		o.TrainSamples = 1000
	}
	if o.DictSize == 0 {
		o.DictSize = zdict.DefaultSize
	}
	if o.Kinds == nil {
		o.Kinds = corpus.Kinds()
	}
	m := &measurer{rdb: rdb, records: o.Records}
	rep := &Report{DictSize: o.DictSize}
	var err error
	if rep.Redis, err = serverVersion(ctx, rdb); err != nil {
		return nil, err
	}
	for _, size := range []int{100, 1024, 16 << 10} {
		body := []byte(strings.Repeat("x", size))
		samples := make([]corpus.Sample, o.Records)
		for i := range samples {
			samples[i] = corpus.Sample{Body: body, Location: "/v1/blobs/1"}
		}
		row, err := m.row(ctx, fmt.Sprintf("x%d", size), Raw, httpmw.Options{}, samples, "application/octet-stream", nil)
		if err != nil {
			return nil, err
		}
		rep.Bench = append(rep.Bench, row)
	}
	for _, k := range o.Kinds {
		d, err := zdict.Train(k.Bodies(1, o.TrainSamples), zdict.Options{Size: o.DictSize, ID: 40000})
		if err != nil {
			return nil, fmt.Errorf("footprint: %s: %w", k.Name, err)
		}
		samples := k.Samples(2, o.Records)
		for _, mode := range []struct {
			name string
			opts httpmw.Options
		}{{Raw, httpmw.Options{}}, {Compressed, httpmw.Options{Compress: true}}, {Dictionary, httpmw.Options{Dictionaries: [][]byte{d}}}} {
			row, err := m.row(ctx, k.Name, mode.name, mode.opts, samples, jsonType, nil)
			if err != nil {
				return nil, err
			}
			rep.Rows = append(rep.Rows, row)
		}
	}
	// A tombstone's used_memory is what the same records cost more with
	// tombstones than without.
	samples := corpus.Small.Samples(2, o.Records)
	without, err := m.row(ctx, corpus.Small.Name, Raw, httpmw.Options{}, samples, jsonType, nil)
	if err != nil {
		return nil, err
	}
	with, err := m.row(ctx, corpus.Small.Name, Raw, httpmw.Options{}, samples, jsonType, &rep.Tombstone)
	if err != nil {
		return nil, err
	}
	rep.Tombstone.UsedMemory = with.UsedMemory - without.UsedMemory
	return rep, nil
}

type measurer struct {
	rdb     *redis.Client
	records int
}

// row writes one record per sample through the middleware, answering with
// the sample's body, Location and contentType, and measures them; with ts
// it keeps tombstones and measures those too.
func (m *measurer) row(ctx context.Context, name, mode string, opts httpmw.Options, samples []corpus.Sample, contentType string, ts *Tombstone) (row Row, err error) {
	prefix, err := newPrefix()
	if err != nil {
		return row, err
	}
	defer func() {
		if derr := m.deleteAll(context.WithoutCancel(ctx), prefix); err == nil {
			err = derr
		}
	}()
	so := redisstore.Options{Prefix: prefix}
	if ts != nil {
		so.TombstoneRetention = time.Hour
	}
	store, err := redisstore.New(m.rdb, so)
	if err != nil {
		return row, err
	}
	h := newHandler(store, opts, samples, contentType)
	send := func(i int, key string) error {
		if err := h.send(ctx, i, key, false); err != nil {
			return fmt.Errorf("footprint: %s %s: %w", name, mode, err)
		}
		return nil
	}
	// Warm up: the scripts loaded, the connections open, before the baseline.
	if err := send(0, "warm-up"); err != nil {
		return row, err
	}
	if err := m.deleteAll(ctx, prefix); err != nil {
		return row, err
	}
	before, err := usedMemory(ctx, m.rdb)
	if err != nil {
		return row, err
	}
	for i := range m.records {
		if err := send(i, fmt.Sprintf("k-%d", i)); err != nil {
			return row, err
		}
	}
	after, err := usedMemory(ctx, m.rdb)
	if err != nil {
		return row, err
	}
	records, tombs, err := m.keys(ctx, prefix)
	if err != nil {
		return row, err
	}
	if len(records) != m.records {
		return row, fmt.Errorf("footprint: %s %s: %d records found under %q, want %d", name, mode, len(records), prefix, m.records)
	}
	row = Row{Corpus: name, Mode: mode, Records: len(records)}
	for _, k := range records {
		usage, err := m.rdb.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			return row, err
		}
		n, err := m.rdb.StrLen(ctx, k).Result()
		if err != nil {
			return row, err
		}
		row.Usage += float64(usage)
		row.Stored += float64(n)
		row.Slack += float64(AllocatorSlack(int(n)))
	}
	for _, s := range samples[:m.records] {
		row.Body += float64(len(s.Body))
	}
	n := float64(len(records))
	row.Body, row.Stored, row.Usage, row.Slack = row.Body/n, row.Stored/n, row.Usage/n, row.Slack/n
	row.UsedMemory = float64(after-before) / n
	if ts != nil {
		if len(tombs) != m.records {
			return row, fmt.Errorf("footprint: %d tombstones, want %d", len(tombs), m.records)
		}
		for _, k := range tombs {
			usage, err := m.rdb.MemoryUsage(ctx, k, 0).Result()
			if err != nil {
				return row, err
			}
			ts.Usage += float64(usage)
		}
		ts.Usage /= n
	}
	return row, nil
}

// handler is the middleware in front of an application that answers
// request i with samples[i].
type handler struct {
	h       http.Handler
	samples []corpus.Sample
}

func newHandler(store *redisstore.Store, opts httpmw.Options, samples []corpus.Sample, contentType string) *handler {
	opts.Scope = httpmw.SharedScope("footprint")
	opts.Timeout = 10 * time.Second
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.URL.Query().Get("i"))
		s := samples[i%len(samples)]
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Location", s.Location)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(s.Body)
	})
	return &handler{h: httpmw.New(store, opts)(app), samples: samples}
}

// send sends request i with key, in process, and checks the answer: the
// sample's body, a replay if replay is set.
func (h *handler) send(ctx context.Context, i int, key string, replay bool) error {
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/things?i="+strconv.Itoa(i), strings.NewReader(`{"amount":1200}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	rec := httptest.NewRecorder()
	h.h.ServeHTTP(rec, req)
	want := h.samples[i%len(h.samples)].Body
	if rec.Code != http.StatusCreated || !bytes.Equal(rec.Body.Bytes(), want) || (rec.Header().Get("Idempotent-Replayed") == "true") != replay {
		return fmt.Errorf("request %d answered %d with %d bytes (want %d, replay %v): %.200s", i, rec.Code, rec.Body.Len(), len(want), replay, rec.Body.String())
	}
	return nil
}

// newPrefix returns a prefix as long as the default "idem:", unlikely to be
// anyone else's.
func newPrefix() (string, error) {
	var b [2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]) + ":", nil
}

// keys lists the records and tombstones under prefix.
func (m *measurer) keys(ctx context.Context, prefix string) (records, tombstones []string, err error) {
	iter := m.rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if k := iter.Val(); strings.HasSuffix(k, ":t") {
			tombstones = append(tombstones, k)
		} else {
			records = append(records, k)
		}
	}
	return records, tombstones, iter.Err()
}

func (m *measurer) deleteAll(ctx context.Context, prefix string) error {
	records, tombs, err := m.keys(ctx, prefix)
	if err != nil {
		return err
	}
	for _, ks := range [][]string{records, tombs} {
		for len(ks) > 0 {
			n := min(len(ks), 500)
			if err := m.rdb.Del(ctx, ks[:n]...).Err(); err != nil {
				return err
			}
			ks = ks[n:]
		}
	}
	return nil
}

func usedMemory(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("footprint: info memory: %w", err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("footprint: INFO memory has no used_memory")
}

func serverVersion(ctx context.Context, c *redis.Client) (string, error) {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("footprint: info server: %w", err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", nil
}

// AllocatorSlack returns the bytes jemalloc (Redis's allocator) adds, by
// rounding the allocation up to its size class, to a Redis string of n
// bytes: the part of MEMORY USAGE that is neither the string nor Redis's
// fixed overhead.
func AllocatorSlack(n int) int {
	alloc := sdsAlloc(n)
	return jemallocSize(alloc) - alloc
}

// jemallocSize returns the size class jemalloc serves a request of n bytes
// from, for n up to a few pages: 8, then multiples of 16 up to 128, then
// four classes per doubling.
func jemallocSize(n int) int {
	switch {
	case n <= 8:
		return 8
	case n <= 128:
		return (n + 15) &^ 15
	}
	k := bits.Len(uint(n-1)) - 1 // 2^k < n <= 2^(k+1)
	step := 1 << (k - 2)
	return (n + step - 1) &^ (step - 1)
}

// sdsAlloc returns the bytes Redis asks the allocator for to hold a string
// of n bytes: the sds header for that length, the bytes, a terminating NUL.
func sdsAlloc(n int) int {
	switch {
	case n < 1<<8:
		return n + 3 + 1
	case n < 1<<16:
		return n + 5 + 1
	default:
		return n + 9 + 1
	}
}
