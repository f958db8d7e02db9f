package footprint

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/internal/corpus"
	"github.com/idemkey/idemkey/internal/loadgen"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/internal/zdict"
	"github.com/idemkey/idemkey/redisstore"
)

// benchDicts holds a dictionary per corpus, trained once per process.
var benchDicts sync.Map // corpus name -> []byte

// benchModes are the ways of storing compared side by side.
func benchModes(b *testing.B, k corpus.Kind) []struct {
	name string
	opts httpmw.Options
} {
	v, ok := benchDicts.Load(k.Name)
	if !ok {
		d, err := zdict.Train(k.Bodies(1, 1000), zdict.Options{ID: 40000})
		require.NoError(b, err)
		v, _ = benchDicts.LoadOrStore(k.Name, d)
	}
	d := v.([]byte)
	return []struct {
		name string
		opts httpmw.Options
	}{{Raw, httpmw.Options{}}, {Compressed, httpmw.Options{Compress: true}}, {Dictionary, httpmw.Options{Dictionaries: [][]byte{d}}}}
}

var benchKinds = []corpus.Kind{corpus.Small, corpus.Payment, corpus.Large}

// cpuMeter reports, besides the wall time, the CPU time per request of this
// process and of redis-server: on a machine shared with other work, wall
// time measures the neighbours, CPU time measures the request.
type cpuMeter struct {
	b           *testing.B
	rdb         *redis.Client
	proc, redis time.Duration
}

func startCPU(b *testing.B, rdb *redis.Client) *cpuMeter {
	runtime.GC() // the set-up's garbage is not the requests' cost
	c := &cpuMeter{b: b, rdb: rdb, proc: loadgen.ProcessCPU()}
	var err error
	c.redis, err = redisCPU(context.Background(), rdb)
	require.NoError(b, err)
	b.ResetTimer()
	return c
}

func (c *cpuMeter) stop() {
	c.b.StopTimer()
	proc := loadgen.ProcessCPU() - c.proc
	r, err := redisCPU(context.Background(), c.rdb)
	require.NoError(c.b, err)
	n := float64(c.b.N)
	c.b.ReportMetric(float64(proc.Nanoseconds())/n, "go-cpu-ns/op")
	c.b.ReportMetric(float64((r-c.redis).Nanoseconds())/n, "redis-cpu-ns/op")
	c.b.ReportMetric(float64((proc+r-c.redis).Nanoseconds())/n, "cpu-ns/op")
}

// redisCPU returns the CPU time redis-server has used, from INFO cpu.
func redisCPU(ctx context.Context, c *redis.Client) (time.Duration, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, err
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// BenchmarkReplay is the replay throughput of the middleware on a private
// redis-server, in process (no HTTP server), 16 requests in flight per CPU,
// stored raw, compressed, and compressed with a dictionary: the cost of
// decompression, side by side.
//
//	go test -run '^$' -bench 'Replay|First' -count 6 ./internal/footprint
func BenchmarkReplay(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	for _, k := range benchKinds {
		samples := k.Samples(2, 500)
		for _, mode := range benchModes(b, k) {
			prefix, err := newPrefix()
			require.NoError(b, err)
			store, err := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
			require.NoError(b, err)
			h := newHandler(store, mode.opts, samples, jsonType)
			for i := range samples {
				require.NoError(b, h.send(ctx, i, "k"+strconv.Itoa(i), false))
			}
			b.Run(k.Name+"/"+mode.name, func(b *testing.B) {
				sendParallel(b, rdb, k, func(n int) error {
					i := n % len(samples)
					return h.send(ctx, i, "k"+strconv.Itoa(i), true)
				})
			})
			m := &measurer{rdb: rdb}
			require.NoError(b, m.deleteAll(ctx, prefix))
		}
	}
}

// BenchmarkFirst is the first-execution throughput (claim, handler, store)
// in the same setting: the cost of compression, side by side.
func BenchmarkFirst(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	run := 0
	for _, k := range benchKinds {
		samples := k.Samples(2, 500)
		for _, mode := range benchModes(b, k) {
			prefix, err := newPrefix()
			require.NoError(b, err)
			store, err := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
			require.NoError(b, err)
			h := newHandler(store, mode.opts, samples, jsonType)
			require.NoError(b, h.send(ctx, 0, "warm-up", false))
			b.Run(k.Name+"/"+mode.name, func(b *testing.B) {
				run++
				sendParallel(b, rdb, k, func(n int) error {
					return h.send(ctx, n, fmt.Sprintf("f%d-%d", run, n), false)
				})
			})
			m := &measurer{rdb: rdb}
			require.NoError(b, m.deleteAll(ctx, prefix))
		}
	}
}

// sendParallel runs send with 16 requests in flight per CPU, numbering the
// requests from 1, and fails the benchmark with the first error; it reports
// k's body size and the CPU per request.
func sendParallel(b *testing.B, rdb *redis.Client, k corpus.Kind, send func(n int) error) {
	var next atomic.Int64
	var failed atomic.Pointer[error]
	b.SetParallelism(16)
	b.SetBytes(int64(k.About))
	cpu := startCPU(b, rdb)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := send(int(next.Add(1))); err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		}
	})
	cpu.stop()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
}
