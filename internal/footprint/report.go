package footprint

import (
	"fmt"
	"math"
	"strings"
)

// The capacity model's load: first executions per second and retention.
const (
	ModelRate      = 10_000
	ModelRetention = 24 * 3600 // seconds
	ShardBytes     = 64 << 30  // a 64 GiB shard
)

// Capacity is the capacity model for one row.
type Capacity struct {
	PerRecord     float64 // bytes per record: used_memory growth per record
	RecordsPerGiB float64
	Live          float64 // records alive at once: ModelRate x ModelRetention
	Bytes         float64 // Live x PerRecord
	Shards        int     // 64 GiB shards for Bytes, filled to the brim
}

// Capacity returns the capacity model for r: ModelRate first executions per
// second kept ModelRetention, each costing r.UsedMemory.
func (r Row) Capacity() Capacity {
	c := Capacity{PerRecord: r.UsedMemory, Live: ModelRate * ModelRetention}
	c.RecordsPerGiB = (1 << 30) / c.PerRecord
	c.Bytes = c.Live * c.PerRecord
	c.Shards = int(math.Ceil(c.Bytes / ShardBytes))
	return c
}

// Markdown renders the report as the tables bench/RESULTS.md takes.
func (rep *Report) Markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("Records written by httpmw on redisstore (Redis %s), %d per row, with the headers `Content-Type` and `Location`; ", rep.Redis, rep.rows())
	p("dictionaries of %d B trained on 1000 other bodies of the same kind. Averages per record. ", rep.DictSize)
	p("`MEMORY USAGE` is `MEMORY USAGE <record> SAMPLES 0`; `used_memory` is the growth of `INFO used_memory` per record, ")
	p("which adds the record's share of the keyspace and expiry tables.\n\n")
	p("| corpus | stored | body B | record string B | MEMORY USAGE B | used_memory B | MEMORY USAGE / body | target 0.5 x body + 150 B |\n")
	p("|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Rows {
		ok := "met"
		if r.Usage > r.Target() {
			ok = "missed"
		}
		p("| %s | %s | %.0f | %.0f | %.0f | %.0f | %.2f | %.0f (%s) |\n", r.Corpus, r.Mode, r.Body, r.Stored, r.Usage, r.UsedMemory, r.Usage/r.Body, r.Target(), ok)
	}
	p("\nFixed overhead per record, stored raw, on the bench app's blob route (bodies of 'x', `Content-Type: application/octet-stream`, `Location: /v1/blobs/1`), as bench/RESULTS.md measures it: MEMORY USAGE minus body minus allocator slack.\n\n")
	p("| body B | record string B | MEMORY USAGE B | allocator slack B | fixed overhead B | used_memory B |\n|---|---|---|---|---|---|\n")
	for _, r := range rep.Bench {
		p("| %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", r.Body, r.Stored, r.Usage, r.Slack, r.Fixed(), r.UsedMemory)
	}
	p("\nTombstone (`TombstoneRetention` set): MEMORY USAGE %.0f B; used_memory %.0f B per tombstone (what records cost more with tombstones than without).\n", rep.Tombstone.Usage, rep.Tombstone.UsedMemory)
	p("\nCapacity at %d first executions/s kept %d h: %.0f million records alive. Bytes per record are the used_memory figures; shards are 64 GiB filled to the brim (leave headroom in practice).\n\n",
		ModelRate, ModelRetention/3600, float64(ModelRate*ModelRetention)/1e6)
	p("| corpus | stored | bytes per record | records per GiB | memory for a day | 64 GiB shards |\n|---|---|---|---|---|---|\n")
	for _, r := range rep.Rows {
		c := r.Capacity()
		p("| %s | %s | %.0f | %.2f M | %.0f GiB | %d |\n", r.Corpus, r.Mode, c.PerRecord, c.RecordsPerGiB/1e6, c.Bytes/(1<<30), c.Shards)
	}
	return b.String()
}

func (rep *Report) rows() int {
	if len(rep.Rows) > 0 {
		return rep.Rows[0].Records
	}
	return 0
}
