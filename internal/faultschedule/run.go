package faultschedule

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/idemclient"
	"github.com/idemkey/idemkey/internal/faultproxy"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/storm"
)

// Config is one run: a guard, a storm and a schedule of faults.
type Config struct {
	// Guard protects the service. Required.
	Guard Guard
	// Instances is the number of service instances. Default: 2.
	Instances int
	// Rate and Duration are the storm's (load mode). Default: 100/s, 3s.
	Rate     float64
	Duration time.Duration
	// Dups is the copies of each operation sent at once. Default: 2.
	Dups int
	// Lease is the guard's lease, for the liveness bound. Required.
	Lease time.Duration
	// Bound is how long a key may take to get a final answer once the
	// faults have healed (storm.ScheduleOptions.Bound). Default: four
	// times the lease plus the longest Retry-After (1s, as the clients
	// cap it) plus the longest backoff (500ms), for a loaded machine.
	Bound time.Duration
	// Slow is how long the slow runs of the Plan take; 0: none. It should
	// stay below Lease, so that a run that is not faulted keeps its key.
	Slow time.Duration
	// AttemptTimeout is how long a client waits for one attempt.
	// Default: 1s. With a quarter of a second, a race build on a loaded
	// machine (go test -p 8) answered no key for twenty seconds: every
	// attempt timed out, every retry added claims, and the completes
	// waited behind them for a pool connection past their deadline. That
	// is a retry storm of the clients' making (the incident lab's
	// subject), not a finding about the faults.
	AttemptTimeout time.Duration
	// Schedule is the faults applied while the storm runs.
	Schedule Schedule
	// RedisArgs are extra redis-server arguments (persistence, maxmemory).
	RedisArgs []string
	// Sentinel runs Redis as a Sentinel deployment (a master, two
	// asynchronous replicas, three sentinels) instead of one server; the
	// instances reach it through a failover client, not through proxies,
	// so the faults that need a proxy do nothing but their log line.
	Sentinel bool
	// Processes runs each instance as a process of its own (the test
	// binary started again, see ChildMain) with the real store, so that a
	// pause is a SIGSTOP and a kill a SIGKILL, at whatever point the
	// instance is. Guard is then unused. Only this package's tests can
	// start such processes. Not with Sentinel.
	Processes bool
	// Foreign is the number of keys sent a different body after the storm,
	// on every instance. Default: 20.
	Foreign int
	// Dir keeps the history and the ledger. Default: a test directory.
	Dir string
}

// Result is what a run recorded and the checker's verdict.
type Result struct {
	// History is the storm's history, its Ledger set.
	History *storm.History
	// Report is storm.CheckSchedule's verdict.
	Report *storm.ScheduleReport
	// Storm is the storm's own report.
	Storm *storm.Report
	// Applied lists the faults as applied, with their times.
	Applied []string
	// HistoryPath, LedgerPath and FaultsPath are the files; the faults
	// file has a JSON line per fault applied or healed, {"at_ns", "event"},
	// its time on the history's clock (from the storm's start).
	HistoryPath, LedgerPath, FaultsPath string
}

// instance is one service instance and its way to Redis.
type instance struct {
	name  string
	child *child // with Config.Processes; svc and srv are nil then
	svc   *Service
	proxy *faultproxy.Proxy
	rdb   redis.UniversalClient
	srv   *httptest.Server
	done  func()
}

type cluster struct {
	t        testing.TB
	cfg      Config
	redis    *redistest.Server
	sentinel *redistest.Sentinel
	ledger   *Ledger
	plan     *Plan

	mu       sync.Mutex
	insts    []*instance
	old      []*instance // killed ones, ended at cleanup
	restarts int
	rr       atomic.Uint64
	tr       *http.Transport
}

func (c *cluster) start(name string) *instance {
	t := c.t
	var (
		p   *faultproxy.Proxy
		rdb redis.UniversalClient
	)
	if c.sentinel != nil {
		o := c.sentinel.Options()
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = time.Second, time.Second, time.Second, time.Second
		rdb = redis.NewFailoverClient(o)
	} else {
		var err error
		if p, err = faultproxy.New(c.redis.Addr()); err != nil {
			t.Fatal(err)
		}
		rdb = redis.NewClient(&redis.Options{Addr: p.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second,
			WriteTimeout: time.Second, PoolTimeout: time.Second, ContextTimeoutEnabled: true})
	}
	if c.cfg.Processes {
		_ = rdb.Close()
		ch, err := startChild(name, p.Addr(), c.ledger.Path(), c.cfg.Lease, c.cfg.Slow)
		if err != nil {
			t.Fatal(err)
		}
		return &instance{name: name, child: ch, proxy: p, rdb: rdb, done: func() {}}
	}
	svc := newService(name, c.ledger, c.plan)
	h, done, err := c.cfg.Guard(svc, rdb)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.front(h))
	return &instance{name: name, svc: svc, proxy: p, rdb: rdb, srv: srv, done: done}
}

// url is where the instance serves.
func (in *instance) url() string {
	if in.child != nil {
		return in.child.url
	}
	return in.srv.URL
}

// inject injects f into the instance's proxy; nil without one.
func (in *instance) inject(f faultproxy.Fault) *faultproxy.Rule {
	if in.proxy == nil {
		return nil
	}
	return in.proxy.Inject(f)
}

func (in *instance) heal(r *faultproxy.Rule) {
	if r != nil {
		r.Remove()
		in.proxy.ResetConns()
	}
}

// RoundTrip sends each attempt to the next instance in turn.
func (c *cluster) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	inst := c.insts[int(c.rr.Add(1))%len(c.insts)]
	c.mu.Unlock()
	r = r.Clone(r.Context())
	host := strings.TrimPrefix(inst.url(), "http://")
	r.URL.Host, r.Host = host, host
	return c.tr.RoundTrip(r)
}

func (c *cluster) inst(i int) *instance {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.insts[i%len(c.insts)]
}

// Run runs one schedule and checks it. It skips the test without a
// redis-server.
func Run(t testing.TB, cfg Config) *Result {
	t.Helper()
	if cfg.Instances == 0 {
		cfg.Instances = 2
	}
	if cfg.Rate == 0 {
		cfg.Rate = 100
	}
	if cfg.Duration == 0 {
		cfg.Duration = 3 * time.Second
	}
	if cfg.Dups == 0 {
		cfg.Dups = 2
	}
	if cfg.AttemptTimeout == 0 {
		cfg.AttemptTimeout = time.Second
	}
	if cfg.Foreign == 0 {
		cfg.Foreign = 20
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Bound == 0 {
		cfg.Bound = 4 * (cfg.Lease + time.Second + 500*time.Millisecond)
	}
	c := &cluster{t: t, cfg: cfg, plan: &Plan{Slow: cfg.Slow},
		tr: &http.Transport{MaxIdleConnsPerHost: 64, DialContext: (&net.Dialer{Timeout: time.Second}).DialContext}}
	if cfg.Sentinel {
		c.sentinel = redistest.StartSentinel(t, redistest.Args(cfg.RedisArgs...))
	} else {
		c.redis = redistest.Start(t, redistest.Args(cfg.RedisArgs...))
	}
	ledger, err := OpenLedger(filepath.Join(cfg.Dir, "ledger.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	c.ledger = ledger
	for i := range cfg.Instances {
		c.insts = append(c.insts, c.start("i"+strconv.Itoa(i)))
	}
	t.Cleanup(func() {
		c.mu.Lock()
		all := append(append([]*instance(nil), c.insts...), c.old...)
		c.mu.Unlock()
		for _, in := range all {
			if in.child != nil {
				in.child.kill()
			}
			if in.proxy != nil {
				_ = in.proxy.Close()
			}
			if in.svc != nil {
				in.svc.gate.release()
			}
		}
		for _, in := range all {
			if in.srv != nil {
				in.srv.CloseClientConnections()
				in.srv.Close()
			}
			_ = in.rdb.Close()
			in.done()
		}
		c.tr.CloseIdleConnections()
	})

	histPath := filepath.Join(cfg.Dir, "history.jsonl")
	hf, err := os.Create(histPath)
	if err != nil {
		t.Fatal(err)
	}
	defer hf.Close()

	nem := &nemesis{c: c}
	var nemDone sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scfg := storm.Config{
		URL:            c.insts[0].url() + "/charge",
		BodyFor:        func(_ string, i int) []byte { return []byte(fmt.Sprintf(`{"op":%d}`, i)) },
		Rate:           cfg.Rate,
		Duration:       cfg.Duration,
		Dups:           cfg.Dups,
		AttemptTimeout: cfg.AttemptTimeout,
		Retries:        30,
		Timeout:        cfg.Schedule.Heals() + cfg.Bound + slack(cfg.Schedule), // every operation is judged by liveness before it gives up
		Policy:         idemclient.Policy{BaseDelay: 50 * time.Millisecond, MaxDelay: 500 * time.Millisecond, MaxRetryAfter: time.Second},
		MaxInFlight:    500,
		Client:         &http.Client{Transport: c, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		History:        hf,
		KeyPrefix:      "fs-",
		OnStart: func() {
			now := time.Now()
			nemDone.Add(1)
			go func() {
				defer nemDone.Done()
				nem.run(ctx, now, cfg.Schedule)
			}()
		},
	}
	rep, err := storm.Run(ctx, scfg)
	if err != nil {
		t.Fatal(err)
	}
	nemDone.Wait()
	c.mu.Lock()
	for _, in := range append(append([]*instance(nil), c.insts...), c.old...) {
		if in.svc == nil {
			continue
		}
		in.svc.mu.Lock()
		for _, e := range in.svc.errs {
			nem.logf("%s: outcome not stored: %s", in.svc.name, e)
		}
		in.svc.mu.Unlock()
	}
	c.mu.Unlock()
	if err := hf.Close(); err != nil {
		t.Fatal(err)
	}

	faultsPath := filepath.Join(cfg.Dir, "faults.jsonl")
	if err := nem.write(faultsPath); err != nil {
		t.Fatal(err)
	}
	foreign := c.mismatchProbes(rep, histPath)
	if err := ledger.Close(); err != nil {
		t.Fatal(err)
	}
	h := readHistory(t, histPath)
	lf, err := os.Open(ledger.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if h.Ledger, err = storm.ReadLedger(lf); err != nil {
		t.Fatal(err)
	}
	if h.Ledger == nil {
		h.Ledger = []storm.Effect{}
	}
	healed := nem.healedAt().Sub(h.Header.Started)
	sr, err := storm.CheckSchedule(h, storm.ScheduleOptions{Foreign: foreign, Healed: healed, Bound: cfg.Bound})
	if err != nil {
		t.Fatal(err)
	}
	return &Result{History: h, Report: sr, Storm: rep, Applied: nem.log(), HistoryPath: histPath, LedgerPath: ledger.Path(), FaultsPath: faultsPath}
}

// slack is how much later than planned a schedule may heal: a pause or a
// kill waits up to busyWithin for a run to catch, a failover or a restart
// takes what it takes; and two seconds more.
func slack(s Schedule) time.Duration {
	d := 2 * time.Second
	for _, f := range s {
		switch f.Kind {
		case Pause, Kill:
			d += busyWithin
		case Failover, RestartRedis:
			d += 5 * time.Second
		}
	}
	return d
}

func readHistory(t testing.TB, path string) *storm.History {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := storm.ReadHistory(f)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// mismatchProbes sends, for the first keys of the history, the key's own
// body and then a different one to every instance, and returns the
// latter's answers.
func (c *cluster) mismatchProbes(_ *storm.Report, histPath string) []storm.Attempt {
	h := readHistory(c.t, histPath)
	client := &http.Client{Timeout: 5 * time.Second, Transport: c.tr}
	var out []storm.Attempt
	n := 0
	for _, op := range h.Operations {
		if n >= c.cfg.Foreign {
			break
		}
		if len(op.Attempts) == 0 {
			continue
		}
		n++
		for i := range c.cfg.Instances {
			url := c.inst(i).url() + "/charge"
			send := func(body string) int {
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
				req.Header.Set("Idempotency-Key", op.Key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					return 0
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			send(fmt.Sprintf(`{"op":%d}`, op.Op))
			st := send(fmt.Sprintf(`{"op":%d,"other":true}`, op.Op))
			out = append(out, storm.Attempt{Op: op.Op, Key: op.Key, Status: st})
		}
	}
	return out
}
