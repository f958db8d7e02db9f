package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore/internal/record"
	"github.com/idemkey/idemkey/redisstore/internal/walk"
)

// A record as seeded by the tests, written directly in the layout of
// lua.go, so that a test can have records that started hours ago and
// leases that ran out long since without waiting for them.
const (
	seedLive      = "live"      // a started record whose lease is held
	seedStuck     = "stuck"     // a started record whose lease ran out an hour ago
	seedReleased  = "released"  // a started record whose lease was given back
	seedCompleted = "completed" // a completed record, 201 with body
)

// seed writes req's record in state kind, first claimed at created, with
// s's retention and lease; it returns the record's name.
func seed(t testing.TB, c redis.Cmdable, s *Store, req Request, kind string, created time.Time, body []byte) string {
	t.Helper()
	fp := record.Fingerprint(req.Fingerprint)
	ret, lease := s.opts.Retention, s.opts.Lease
	thr := strconv.FormatInt((ret - lease).Milliseconds(), 10)
	st := &record.Started{Attempt: 2, RecoveryPoint: "charged", RecoveryData: []byte("ch_1"), Label: req.Label, CreatedMS: created.UnixMilli()}
	v, ttl := record.AppendStarted(nil, &fp, "tok12345", thr, st), ret
	switch kind {
	case seedStuck:
		ttl = ret - lease - time.Hour
	case seedReleased:
		v[1] = record.FlagReleased
	case seedCompleted:
		v = record.AppendCompleted(nil, &fp, 1, 201, body)
	}
	name := s.keys(req.Scope, req.Key).Record()
	require.NoError(t, c.Set(context.Background(), name, v, ttl).Err())
	return name
}

// scanAll returns what Scan passes on, by name.
func scanAll(t *testing.T, s *Store, opts ScanOptions) (map[string]*Scanned, ScanSummary) {
	t.Helper()
	got := map[string]*Scanned{}
	sum, err := s.Scan(context.Background(), opts, func(sc *Scanned) error {
		c := *sc
		got[sc.Name] = &c
		return nil
	})
	require.NoError(t, err)
	return got, sum
}

// testScan is Scan's suite: each subtest uses a prefix of its own.
func testScan(t *testing.T, b backend) {
	ctx := context.Background()
	prefix := func(t *testing.T) string { return fmt.Sprintf("scan%d:", keySeq.Add(1)) }

	t.Run("every state, its fields, and the filters", func(t *testing.T) {
		s := newStore(t, b, Options{Prefix: prefix(t), Lease: 30 * time.Second})
		hourAgo, now := time.Now().Add(-time.Hour), time.Now()
		names := map[string]string{}
		for _, kind := range []string{seedLive, seedStuck, seedReleased, seedCompleted} {
			req := newReq(t)
			req.Label = "POST /v1/" + kind
			names[kind] = seed(t, b.client, s, req, kind, hourAgo, []byte("the body"))
		}
		young := newReq(t)
		names["young"] = seed(t, b.client, s, young, seedStuck, now, nil)
		// A real claim and completion, and its tombstone, beside them.
		ts := newStore(t, b, Options{Prefix: s.opts.Prefix, TombstoneRetention: time.Hour})
		req := newReq(t)
		c, err := ts.Claim(ctx, req)
		require.NoError(t, err)
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200, Body: []byte("ok")}))
		names["claimed"] = ts.keys(req.Scope, req.Key).Record()

		all, sum := scanAll(t, s, ScanOptions{})
		require.Len(t, all, 6)
		require.Equal(t, 6, sum.Records)
		require.Equal(t, 6, sum.Matched)
		require.Equal(t, 0, sum.NotRecords)
		require.Equal(t, 1, sum.Tombstones)
		require.Equal(t, 7, sum.Keys)
		require.GreaterOrEqual(t, sum.Calls, 1)
		if b.mr == nil {
			require.Positive(t, sum.SlowestCall)
		}

		live := all[names[seedLive]].Record
		require.Equal(t, Started, live.State)
		require.Equal(t, "POST /v1/live", live.Label)
		require.Equal(t, 2, live.Attempt)
		require.Equal(t, "charged", live.RecoveryPoint)
		require.Equal(t, []byte("ch_1"), live.RecoveryData)
		require.Equal(t, hourAgo.UnixMilli(), live.CreatedAt.UnixMilli())
		require.Greater(t, live.LeaseTTL, 20*time.Second)
		require.Empty(t, live.Scope+live.Key, "neither is stored")
		require.Nil(t, live.Response)

		stuck := all[names[seedStuck]].Record
		require.Equal(t, Started, stuck.State)
		require.Zero(t, stuck.LeaseTTL)
		require.Greater(t, stuck.TTL, 22*time.Hour)

		require.Equal(t, Released, all[names[seedReleased]].Record.State)
		done := all[names[seedCompleted]].Record
		require.Equal(t, Completed, done.State)
		require.Equal(t, 201, done.Response.Code)
		require.Nil(t, done.Response.Body, "no body unless asked")
		require.Equal(t, 200, all[names["claimed"]].Record.Response.Code)
		for _, sc := range all {
			require.Empty(t, sc.Problem)
			require.NotEmpty(t, sc.Server)
		}

		withBodies, _ := scanAll(t, s, ScanOptions{Bodies: true})
		require.Equal(t, []byte("the body"), withBodies[names[seedCompleted]].Record.Response.Body)
		require.Equal(t, []byte("ok"), withBodies[names["claimed"]].Record.Response.Body)

		keys := func(m map[string]*Scanned) []string {
			var out []string
			for kind, n := range names {
				if _, ok := m[n]; ok {
					out = append(out, kind)
				}
			}
			slices.Sort(out)
			return out
		}
		for _, tt := range []struct {
			opts ScanOptions
			want []string
		}{
			{ScanOptions{State: Started}, []string{seedLive, seedStuck, "young"}},
			{ScanOptions{State: Released}, []string{seedReleased}},
			{ScanOptions{State: Completed}, []string{"claimed", seedCompleted}},
			{ScanOptions{LeaseExpired: true}, []string{seedReleased, seedStuck, "young"}},
			{ScanOptions{State: Started, LeaseExpired: true}, []string{seedStuck, "young"}},
			{ScanOptions{Older: 10 * time.Minute}, []string{seedLive, seedReleased, seedStuck}},
			{ScanOptions{State: Started, LeaseExpired: true, Older: 10 * time.Minute}, []string{seedStuck}},
			{ScanOptions{Older: 2 * time.Hour}, nil},
		} {
			got, sum := scanAll(t, s, tt.opts)
			require.Equal(t, tt.want, keys(got), "%+v", tt.opts)
			require.Equal(t, len(tt.want), sum.Matched)
			require.Equal(t, 6, sum.Records)
		}
	})

	t.Run("a small COUNT takes many calls and finds the same", func(t *testing.T) {
		s := newStore(t, b, Options{Prefix: prefix(t)})
		for range 50 {
			seed(t, b.client, s, newReq(t), seedCompleted, time.Now(), nil)
		}
		got, sum := scanAll(t, s, ScanOptions{Count: 5})
		require.Len(t, got, 50)
		if b.mr == nil { // miniredis answers every key in one call
			require.Greater(t, sum.Calls, 5)
		}
	})

	t.Run("fn's error stops the scan", func(t *testing.T) {
		s := newStore(t, b, Options{Prefix: prefix(t)})
		for range 20 {
			seed(t, b.client, s, newReq(t), seedCompleted, time.Now(), nil)
		}
		stop := errors.New("enough")
		n := 0
		sum, err := s.Scan(ctx, ScanOptions{Count: 2}, func(*Scanned) error {
			if n++; n == 3 {
				return stop
			}
			return nil
		})
		require.ErrorIs(t, err, stop)
		require.Equal(t, 3, n)
		require.Equal(t, 3, sum.Matched)
	})

	t.Run("invalid options", func(t *testing.T) {
		s := newStore(t, b, Options{Prefix: prefix(t)})
		for _, o := range []ScanOptions{{State: "running"}, {Older: -1}, {Count: -1}} {
			_, err := s.Scan(ctx, o, func(*Scanned) error { return nil })
			require.ErrorIs(t, err, ErrInvalidRequest, "%+v", o)
		}
	})

	t.Run("an ended context stops it", func(t *testing.T) {
		s := newStore(t, b, Options{Prefix: prefix(t)})
		seed(t, b.client, s, newReq(t), seedCompleted, time.Now(), nil)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := s.Scan(cctx, ScanOptions{}, func(*Scanned) error { return nil })
		require.ErrorIs(t, err, context.Canceled)
	})
}

func TestScanMiniredis(t *testing.T) { testScan(t, miniBackend(t)) }
func TestScanRedis(t *testing.T)     { testScan(t, realBackend(t)) }

// TestScanCluster runs beside the package's other parallel tests: a
// cluster of its own, mostly waiting on gossip (12 s of the package's
// serial time otherwise).
func TestScanCluster(t *testing.T) {
	t.Parallel()
	testScan(t, clusterBackend(t))
}

// TestScanHostileKeys fills the prefix with keys that are not idemkey
// records, of every kind: each is reported, with why, and the records
// between them are all found.
func TestScanHostileKeys(t *testing.T) {
	for _, bk := range []struct {
		name string
		b    func(*testing.T) backend
	}{{"miniredis", miniBackend}, {"redis", realBackend}, {"cluster", clusterBackend}} {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.b(t)
			ctx := context.Background()
			s := newStore(t, b, Options{Prefix: "hostile:"})
			c := b.client
			var records []string
			for i := range 30 {
				kind := []string{seedLive, seedStuck, seedCompleted}[i%3]
				records = append(records, seed(t, c, s, newReq(t), kind, time.Now().Add(-time.Hour), nil))
			}
			at := func(i int) string { return s.keys("hostile", strconv.Itoa(i)).Record() }
			fp := record.Fingerprint("f")
			huge := record.AppendStarted(nil, &fp, "tok12345", "1", &record.Started{Attempt: 1, RecoveryPoint: "p",
				RecoveryData: make([]byte, walk.StartedMax+10)})
			want := map[string]string{ // name -> what Problem must say
				"hostile:session:42":    "not a key name idemkey writes (a string)",
				"hostile:{not-a-tag}":   "not a key name idemkey writes (a string)",
				"hostile:\x1b[2J\xff":   "not a key name idemkey writes (a string)",
				"hostile:queue":         "not a key name idemkey writes (a list)",
				at(0) + ":extra":        "not a key name idemkey writes (a string)",
				at(1):                   "a list, not an idemkey record",
				at(2):                   "a set, not an idemkey record",
				at(3):                   "a zset, not an idemkey record",
				at(4):                   "a record in the format of idemkey before 0.2",
				at(5):                   "a string that is not an idemkey record",
				at(6):                   "a string that is not an idemkey record",
				at(7):                   "a string that is not an idemkey record",
				at(8):                   "an empty string, not an idemkey record",
				at(9):                   "a started record of",
				"hostile:{" + "x" + "}": "not a key name idemkey writes (a string)",
			}
			for name := range want {
				switch {
				case name == "hostile:queue", name == at(1):
					require.NoError(t, c.RPush(ctx, name, "job").Err())
				case name == at(2):
					require.NoError(t, c.SAdd(ctx, name, "m").Err())
				case name == at(3):
					require.NoError(t, c.ZAdd(ctx, name, redis.Z{Score: 1, Member: "m"}).Err())
				case name == at(4):
					require.NoError(t, c.HSet(ctx, name, "state", "completed").Err())
				}
			}
			for name, v := range map[string]string{
				"hostile:session:42":  "other app",
				"hostile:{not-a-tag}": "x",
				"hostile:\x1b[2J\xff": "x",
				at(0) + ":extra":      "x",
				at(5):                 "S-garbage",
				at(6):                 "C-0123456789abcdefnot:numbers",
				at(7):                 "S-0123456789abcdef12345678" + "1:5000:9999:short",
				at(8):                 "",
				at(9):                 string(huge),
				"hostile:{x}":         "x",
			} {
				require.NoError(t, c.Set(ctx, name, v, time.Hour).Err())
			}
			// Keys outside the prefix are not seen.
			require.NoError(t, c.Set(ctx, "other:{x}", "x", time.Hour).Err())

			got, sum := scanAll(t, s, ScanOptions{Count: 3})
			for name, problem := range want {
				require.Contains(t, got, name)
				require.Nil(t, got[name].Record, name)
				require.Contains(t, got[name].Problem, problem, "%q", name)
			}
			for _, name := range records {
				require.Contains(t, got, name)
				require.NotNil(t, got[name].Record)
			}
			require.Len(t, got, len(want)+len(records))
			require.Equal(t, len(want), sum.NotRecords)
			require.Equal(t, len(records), sum.Records)

			// Filters leave the records out, never the keys that are not records.
			got, _ = scanAll(t, s, ScanOptions{State: Started, LeaseExpired: true})
			require.Len(t, got, len(want)+10)
		})
	}
}

// TestScanAtScale scans 10,000 records, 7 of them stuck, on one server and
// on a cluster: it finds the 7, holds no more than about one SCAN call's
// records at a time, and never holds Redis up: it sends no KEYS, only SCAN
// calls of bounded work (COUNT: at least total/COUNT calls). How long they
// take is the machine's as much as the scan's (a loaded machine's
// scheduler alone holds a command for tens of milliseconds, or a PING for
// a second), so the figures are logged, not asserted: Redis's own time per
// SCAN call (commandstats), the slow log, PINGs sent every millisecond on
// another connection during the scan (go test -run TestScanAtScale -v
// ./redisstore/). The live records' lease is an hour: with the default
// 10s, a slow run let 16 of them run out during the seeding and the scan
// (.ci/stress: 23 stuck records found for 7).
func TestScanAtScale(t *testing.T) {
	for _, bk := range []struct {
		name string
		b    func(*testing.T) (backend, []*redis.Client)
	}{
		{"redis", func(t *testing.T) (backend, []*redis.Client) {
			srv := redistest.Start(t)
			c := srv.Client(t)
			return backend{client: c}, []*redis.Client{c}
		}},
		{"cluster", func(t *testing.T) (backend, []*redis.Client) {
			cl := redistest.StartCluster(t, 3)
			var nodes []*redis.Client
			for i := range cl.Masters() {
				nodes = append(nodes, cl.Node(i).Client(t))
			}
			return backend{client: cl.Client(t)}, nodes
		}},
	} {
		t.Run(bk.name, func(t *testing.T) {
			if bk.name == "cluster" {
				redistest.Long(t) // TestScanCluster walks a cluster by default
			}
			b, nodes := bk.b(t)
			ctx := context.Background()
			const total, stuckN, bodyLen = 10_000, 7, 2048
			s := newStore(t, b, Options{Prefix: "scale:", Lease: time.Hour})
			for _, n := range nodes {
				// Every call of 100ms or more goes to the slow log.
				require.NoError(t, n.ConfigSet(ctx, "slowlog-log-slower-than", "100000").Err())
				require.NoError(t, n.SlowLogReset(ctx).Err())
				require.NoError(t, n.ConfigResetStat(ctx).Err())
			}
			body := []byte(strings.Repeat("b", bodyLen))
			stuck := map[string]bool{}
			p := b.client.Pipeline()
			for i := range total {
				req := Request{Scope: "scale", Key: strconv.Itoa(i), Fingerprint: "f", Label: "POST /v1/payments"}
				kind := seedCompleted
				switch {
				case i%1400 == 7 && len(stuck) < stuckN:
					kind = seedStuck
				case i%100 == 3:
					kind = seedLive
				}
				name := seed(t, p, s, req, kind, time.Now().Add(-time.Hour), body)
				if kind == seedStuck {
					stuck[name] = true
				}
				if i%500 == 499 {
					_, err := p.Exec(ctx)
					require.NoError(t, err)
				}
			}
			_, err := p.Exec(ctx)
			require.NoError(t, err)
			require.Len(t, stuck, stuckN)

			// A PING every millisecond on a connection of its own, while the scan runs.
			pinger := redis.NewClient(&redis.Options{Addr: nodes[0].Options().Addr, PoolSize: 1})
			defer pinger.Close()
			require.NoError(t, pinger.Ping(ctx).Err())
			var (
				slowestPing time.Duration
				pings       int
				wg          sync.WaitGroup
				done        = make(chan struct{})
			)
			wg.Go(func() {
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-done:
						return
					case <-tick.C:
					}
					start := time.Now()
					if pinger.Ping(ctx).Err() == nil {
						pings++
						slowestPing = max(slowestPing, time.Since(start))
					}
				}
			})

			// The live heap, after a collection, at every 1000th record the
			// scan passes on: with bodies read, 10,000 records are over 20 MB.
			var before, peak runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			found, seen := map[string]bool{}, 0
			start := time.Now()
			sum, err := s.Scan(ctx, ScanOptions{Bodies: true}, func(sc *Scanned) error {
				require.Empty(t, sc.Problem)
				if seen++; seen%1000 == 0 {
					var m runtime.MemStats
					runtime.GC()
					runtime.ReadMemStats(&m)
					if m.HeapAlloc > peak.HeapAlloc {
						peak = m
					}
				}
				if sc.Record.State == Started && sc.Record.LeaseTTL == 0 {
					found[sc.Name] = true
				}
				return nil
			})
			elapsed := time.Since(start)
			close(done)
			wg.Wait()
			require.NoError(t, err)
			require.Equal(t, stuck, found, "every stuck record, and only those")
			require.Equal(t, total, sum.Records)
			require.Equal(t, total, seen)
			grew := int64(peak.HeapAlloc) - int64(before.HeapAlloc)
			require.Less(t, grew, int64(total*bodyLen/2), "the scan held most records at once")

			// Only the stuck ones, as doctor and 'idemkey ls --expired' ask.
			n := 0
			_, err = s.Scan(ctx, ScanOptions{State: Started, LeaseExpired: true}, func(sc *Scanned) error {
				require.True(t, stuck[sc.Name])
				n++
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, stuckN, n)

			var slowScans int
			var scanUsec, scanCalls, readUsec, readCalls, keysCalls float64
			for _, node := range nodes {
				entries, err := node.SlowLogGet(ctx, 128).Result()
				require.NoError(t, err)
				for _, e := range entries {
					t.Logf("slow log: %v %v", e.Duration, e.Args)
					if len(e.Args) > 0 && strings.EqualFold(fmt.Sprint(e.Args[0]), "scan") {
						slowScans++
					}
				}
				stats, err := node.Info(ctx, "commandstats").Result()
				require.NoError(t, err)
				for line := range strings.Lines(stats) {
					name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
					if !ok {
						continue
					}
					f := map[string]float64{}
					for kv := range strings.SplitSeq(rest, ",") {
						k, v, _ := strings.Cut(kv, "=")
						f[k], _ = strconv.ParseFloat(v, 64)
					}
					switch name {
					case "cmdstat_scan":
						scanUsec, scanCalls = scanUsec+f["usec"], scanCalls+f["calls"]
					case "cmdstat_getrange", "cmdstat_pttl", "cmdstat_strlen", "cmdstat_get":
						readUsec, readCalls = readUsec+f["usec"], readCalls+f["calls"]
					case "cmdstat_keys":
						keysCalls += f["calls"]
					}
				}
			}
			t.Logf("%d records on %d servers: two scans (bodies, then stuck only) of %d SCAN calls each, the first in %v; "+
				"slowest SCAN round trip %v; Redis's time per SCAN call %.0fµs, per read %.1fµs (commandstats, both scans); "+
				"%d PINGs during the first scan, slowest %v; live heap grew %.1f MB at most (bodies %.1f MB)",
				total, len(nodes), sum.Calls, elapsed.Round(time.Millisecond), sum.SlowestCall.Round(time.Microsecond),
				scanUsec/scanCalls, readUsec/readCalls, pings, slowestPing.Round(time.Microsecond),
				float64(grew)/1e6, float64(total*bodyLen)/1e6)
			require.Zero(t, keysCalls, "KEYS")
			require.Equal(t, float64(2*sum.Calls), scanCalls, "every SCAN call counted")
			require.GreaterOrEqual(t, sum.Calls, total/walk.DefaultCount, "SCAN calls of COUNT %d", walk.DefaultCount)
			t.Logf("%d SCAN calls of 100ms or more in the slow log", slowScans)
		})
	}
}
