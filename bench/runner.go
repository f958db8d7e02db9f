package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/internal/loadgen"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/internal/storm"
	"github.com/idemkey/idemkey/redisstore"
)

// Phase names, for Config.Phases.
const (
	PhaseFirst   = "first"   // first-execution throughput, all contenders
	PhaseReplay  = "replay"  // replay throughput, limit and ours
	PhaseStorm   = "storm"   // retry storm per contender per round, then ours on two instances
	PhaseCost    = "cost"    // Redis round trips and commands per request
	PhaseMemory  = "memory"  // Redis memory per stored record
	PhaseCluster = "cluster" // the storm against a 3-master cluster
	PhasePeers   = "peers"   // go -C bench run ./cmd/peers -json
)

// AllPhases lists every phase, in the order a run makes them.
var AllPhases = []string{PhaseFirst, PhaseReplay, PhaseStorm, PhaseCost, PhaseMemory, PhaseCluster, PhasePeers}

// Config is one run of the scenario runner.
type Config struct {
	// Rounds is how many times the contenders are measured in turn.
	Rounds int `json:"rounds"`
	// Duration is the length of each throughput measurement.
	Duration time.Duration `json:"duration_ns"`
	// Concurrency is the keep-alive clients of the throughput measurements.
	Concurrency int `json:"concurrency"`
	// ReplayKeys are stored first, then cycled over by the replay phase.
	ReplayKeys int `json:"replay_keys"`
	// StormKeys x StormDups requests, StormConcurrency at a time.
	StormKeys        int `json:"storm_keys"`
	StormDups        int `json:"storm_dups"`
	StormConcurrency int `json:"storm_concurrency"`
	// CostRequests is the requests sent, one at a time, per cost case.
	CostRequests int `json:"cost_requests"`
	// Masters is the size of the cluster of the cluster phase.
	Masters int `json:"masters"`
	// Phases selects what to measure; nil means AllPhases.
	Phases []string `json:"phases"`
	// ModuleDir is the bench module's directory, where the peers phase runs
	// cmd/peers; "" finds it with FindModule.
	ModuleDir string `json:"-"`
	// Command is recorded in the results as the command that made them.
	Command string `json:"-"`
	// Log receives progress lines; nil discards them.
	Log io.Writer `json:"-"`
}

// DefaultConfig is the full run: about two and a half minutes.
func DefaultConfig() Config {
	return Config{
		Rounds: 5, Duration: 1500 * time.Millisecond, Concurrency: 64, ReplayKeys: 1000,
		StormKeys: 2000, StormDups: 10, StormConcurrency: 128, CostRequests: 500, Masters: 3,
	}
}

// QuickConfig is a smoke run for CI: a few hundred milliseconds per phase,
// a smaller storm, no peers.
func QuickConfig() Config {
	return Config{
		Rounds: 1, Duration: 300 * time.Millisecond, Concurrency: 32, ReplayKeys: 200,
		StormKeys: 300, StormDups: 10, StormConcurrency: 64, CostRequests: 50, Masters: 3,
		Phases: []string{PhaseFirst, PhaseReplay, PhaseStorm, PhaseCost, PhaseMemory, PhaseCluster},
	}
}

func (c *Config) has(phase string) bool {
	return c.Phases == nil || slices.Contains(c.Phases, phase)
}

func (c *Config) validate() error {
	switch {
	case c.Rounds < 1:
		return errors.New("rounds must be at least 1")
	case c.Duration <= 0:
		return errors.New("duration must be positive")
	case c.Concurrency < 1 || c.StormConcurrency < 1:
		return errors.New("concurrency and storm concurrency must be at least 1")
	case c.ReplayKeys < 1 || c.StormKeys < 1 || c.StormDups < 1 || c.CostRequests < 1:
		return errors.New("replay keys, storm keys, storm dups and cost requests must be at least 1")
	case c.Masters < 1:
		return errors.New("masters must be at least 1")
	}
	for _, p := range c.Phases {
		if !slices.Contains(AllPhases, p) {
			return fmt.Errorf("unknown phase %q (phases: %s)", p, strings.Join(AllPhases, ","))
		}
	}
	return nil
}

// firstBody is the request body of the throughput phases.
var firstBody = []byte(`{"amount":1250,"currency":"eur"}`)

// contender is one of the three servers with its own app, its own Redis
// client and its own keep-alive clients, as separate deployments would have.
type contender struct {
	name   string
	app    *app
	srv    *server
	redis  *redis.Client // nil for bare
	count  *cmdCounter   // commands sent by redis
	load   *http.Client  // throughput phases
	storms *http.Client  // storms
	replay []string      // keys stored for the replay phase
}

func (c *contender) url(path string) string { return c.srv.url + path }

type runner struct {
	cfg   Config
	log   func(format string, args ...any)
	nonce string
	dir   string
	res   *Results

	redis *redistest.Server
	admin *redis.Client
	store *redisstore.Store // ours
	cs    map[string]*contender
}

// Run makes every measurement cfg selects against private redis-servers it
// launches (and kills) itself, and returns the figures and checks.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	r := &runner{cfg: cfg, cs: map[string]*contender{}}
	r.log = func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, "storm-bench: "+format+"\n", args...)
		}
	}
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	r.nonce = hex.EncodeToString(nonce[:])
	r.res = &Results{Env: newEnv(cfg.Command), Config: cfg}

	dir, err := os.MkdirTemp("", "idemkey-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	r.dir = dir
	if err := r.setup(ctx); err != nil {
		r.close()
		return nil, err
	}
	err = r.run(ctx)
	r.close()
	r.res.Env.LoadAfter = loadAvg()
	r.res.Duration = time.Since(start).Round(time.Millisecond)
	if err != nil {
		return r.res, err
	}
	r.checks()
	r.notes()
	return r.res, nil
}

// notes records what qualifies the figures.
func (r *runner) notes() {
	// At the start nothing of ours runs yet: a load average above half the
	// cores means other work shared the machine.
	if v, err := strconv.ParseFloat(r.res.Env.LoadBefore, 64); err == nil && v > float64(r.res.Env.NumCPU)/2 {
		r.res.Notes = append(r.res.Notes, fmt.Sprintf(
			"the machine was busy before the run started (1-minute load average %s on %d cores): other work competed with it, so req/s are low and noisy; the CPU-per-request figures and the medians of per-round ratios hold up better", r.res.Env.LoadBefore, r.res.Env.NumCPU))
	}
}

func (r *runner) run(ctx context.Context) error {
	if r.cfg.has(PhaseFirst) || r.cfg.has(PhaseReplay) || r.cfg.has(PhaseStorm) {
		if err := r.rounds(ctx); err != nil {
			return err
		}
	}
	if r.cfg.has(PhaseStorm) {
		s, err := r.twoInstances(ctx)
		if err != nil {
			return err
		}
		r.res.StormTwoInstances = s
	}
	if r.cfg.has(PhaseCost) {
		if err := r.cost(ctx); err != nil {
			return fmt.Errorf("cost: %w", err)
		}
	}
	if r.cfg.has(PhaseMemory) {
		if err := r.memory(ctx); err != nil {
			return fmt.Errorf("memory: %w", err)
		}
	}
	if r.cfg.has(PhaseCluster) {
		if err := r.cluster(ctx); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
	}
	if r.cfg.has(PhasePeers) {
		dir := r.cfg.ModuleDir
		if dir == "" {
			var err error
			if dir, err = FindModule(); err != nil {
				return fmt.Errorf("peers: %w", err)
			}
		}
		p, err := runPeers(ctx, dir, r.cfg, r.log)
		if err != nil {
			return fmt.Errorf("peers: %w", err)
		}
		r.res.Peers = p
	}
	return nil
}

// setup launches redis-server and the three contenders.
func (r *runner) setup(ctx context.Context) error {
	srv, err := redistest.Launch(r.dir)
	if err != nil {
		return err
	}
	r.redis = srv
	r.admin = newRedisClient(srv.Addr())
	if err := r.admin.Ping(ctx).Err(); err != nil {
		return err
	}
	r.res.Env.RedisVersion = redisVersion(ctx, r.admin)
	r.log("redis-server %s on %s", r.res.Env.RedisVersion, srv.Addr())

	for _, name := range []string{Bare, Limit, Ours} {
		c := &contender{name: name, app: &app{}, count: &cmdCounter{},
			load: loadgen.NewClient(r.cfg.Concurrency), storms: loadgen.NewClient(r.cfg.StormConcurrency)}
		var h http.Handler
		switch name {
		case Bare:
			h = bareEngine(c.app)
		case Limit:
			c.redis = newRedisClient(srv.Addr())
			c.redis.AddHook(c.count)
			l, err := newLimit(ctx, c.app, c.redis)
			if err != nil {
				return err
			}
			h = l.engine()
		case Ours:
			c.redis = newRedisClient(srv.Addr())
			c.redis.AddHook(c.count)
			store, err := redisstore.New(c.redis, redisstore.Options{})
			if err != nil {
				return err
			}
			r.store = store
			h = oursEngine(c.app, store)
		}
		if c.srv, err = serve(h); err != nil {
			return err
		}
		r.cs[name] = c
	}
	return nil
}

func (r *runner) close() {
	for _, c := range r.cs {
		if c.srv != nil {
			c.srv.close()
		}
		c.load.CloseIdleConnections()
		c.storms.CloseIdleConnections()
		if c.redis != nil {
			_ = c.redis.Close()
		}
	}
	if r.admin != nil {
		_ = r.admin.Close()
	}
	if r.redis != nil {
		r.redis.Close()
	}
}

// key returns an idempotency key unique to this run, phase, worker and seq.
func (r *runner) key(phase string, worker, seq int) string {
	b := make([]byte, 0, 48)
	b = append(b, r.nonce...)
	b = append(b, '-')
	b = append(b, phase...)
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(worker), 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(seq), 10)
	return string(b)
}

func newPayment(url, key string, body []byte) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header[keyHeader] = []string{key}
	return req, nil
}

// timed runs one throughput measurement and adds the CPU that the runner
// process and redis-server spent on it.
func (r *runner) timed(ctx context.Context, run func() (*loadgen.Result, error)) (Load, error) {
	cpu0 := processCPU()
	rcpu0, err := redisCPU(ctx, r.admin)
	if err != nil {
		return Load{}, err
	}
	res, err := run()
	if err != nil {
		return Load{}, err
	}
	cpu := processCPU() - cpu0
	rcpu, err := redisCPU(ctx, r.admin)
	if err != nil {
		return Load{}, err
	}
	return loadOf(res, cpu, rcpu-rcpu0), nil
}

// first measures first executions: every request has a fresh key.
func (r *runner) first(ctx context.Context, c *contender, phase string, d time.Duration) (*loadgen.Result, error) {
	url := c.url(paymentPath)
	phase = c.name + "." + phase
	res, err := loadgen.Run(ctx, loadgen.Config{
		Concurrency: r.cfg.Concurrency, Duration: d, Client: c.load,
		Request: func(worker, seq int) (*http.Request, error) {
			return newPayment(url, r.key(phase, worker, seq), firstBody)
		},
		Check: expectStatus(http.StatusCreated, false),
	})
	if err == nil && res.Errors > 0 {
		err = fmt.Errorf("%s first execution: %d errors, first: %v", c.name, res.Errors, res.FirstError)
	}
	return res, err
}

// populate stores the replay keys of c.
func (r *runner) populate(ctx context.Context, c *contender) error {
	c.replay = make([]string, r.cfg.ReplayKeys)
	for i := range c.replay {
		c.replay[i] = r.key(c.name+".replay", 0, i)
	}
	url := c.url(paymentPath)
	var next atomic.Int64
	res, err := loadgen.Run(ctx, loadgen.Config{
		Concurrency: min(r.cfg.Concurrency, len(c.replay)), MaxRequests: len(c.replay), Client: c.load,
		Request: func(int, int) (*http.Request, error) {
			// MaxRequests bounds the calls: each key is sent exactly once.
			return newPayment(url, c.replay[next.Add(1)-1], firstBody)
		},
		Check: expectStatus(http.StatusCreated, false),
	})
	if err == nil && res.Errors > 0 {
		err = fmt.Errorf("%s populating replay keys: %d errors, first: %v", c.name, res.Errors, res.FirstError)
	}
	return err
}

// replayLoad measures replays: requests cycle over the stored keys.
func (r *runner) replayLoad(ctx context.Context, c *contender, d time.Duration) (*loadgen.Result, error) {
	url := c.url(paymentPath)
	conc := r.cfg.Concurrency
	before := c.app.execs.Load()
	res, err := loadgen.Run(ctx, loadgen.Config{
		Concurrency: conc, Duration: d, Client: c.load,
		Request: func(worker, seq int) (*http.Request, error) {
			return newPayment(url, c.replay[(seq*conc+worker)%len(c.replay)], firstBody)
		},
		Check: expectStatus(http.StatusCreated, true),
	})
	if err == nil && res.Errors > 0 {
		err = fmt.Errorf("%s replay: %d errors, first: %v", c.name, res.Errors, res.FirstError)
	}
	if n := c.app.execs.Load() - before; err == nil && n > 0 {
		err = fmt.Errorf("%s replay: the handler ran %d times", c.name, n)
	}
	return res, err
}

// rounds measures the contenders in turn, round after round, rotating the
// order so that none always goes first.
func (r *runner) rounds(ctx context.Context) error {
	names := []string{Bare, Limit, Ours}
	warm := min(r.cfg.Duration/2, 500*time.Millisecond)
	r.log("warm-up: %s of first executions per contender", warm)
	for _, n := range names {
		if _, err := r.first(ctx, r.cs[n], "warm", warm); err != nil {
			return err
		}
	}
	if r.cfg.has(PhaseReplay) {
		for _, n := range []string{Limit, Ours} {
			if err := r.populate(ctx, r.cs[n]); err != nil {
				return err
			}
		}
		r.log("stored %d replay keys for limit and ours", r.cfg.ReplayKeys)
	}
	for i := range r.cfg.Rounds {
		rd := Round{First: map[string]Load{}}
		for k := range names {
			rd.Order = append(rd.Order, names[(i+k)%len(names)])
		}
		phase := "r" + strconv.Itoa(i)
		if r.cfg.has(PhaseFirst) {
			for _, n := range rd.Order {
				l, err := r.timed(ctx, func() (*loadgen.Result, error) { return r.first(ctx, r.cs[n], phase, r.cfg.Duration) })
				if err != nil {
					return err
				}
				rd.First[n] = l
			}
			rd.FirstOursLimitCPU = cpuRatio(rd.First[Ours], rd.First[Limit])
			rd.FirstExtraCPUUS = round1(rd.First[Ours].CPUUS + rd.First[Ours].RedisCPUUS - rd.First[Limit].CPUUS - rd.First[Limit].RedisCPUUS)
			rd.FirstOursLimit = ratio(rd.First[Ours].RPS, rd.First[Limit].RPS)
			rd.FirstOursBare = ratio(rd.First[Ours].RPS, rd.First[Bare].RPS)
			rd.FirstLimitBare = ratio(rd.First[Limit].RPS, rd.First[Bare].RPS)
		}
		if r.cfg.has(PhaseReplay) {
			rd.Replay = map[string]Load{}
			for _, n := range rd.Order {
				if n == Bare {
					continue
				}
				l, err := r.timed(ctx, func() (*loadgen.Result, error) { return r.replayLoad(ctx, r.cs[n], r.cfg.Duration) })
				if err != nil {
					return err
				}
				rd.Replay[n] = l
			}
			rd.ReplayOursLimitCPU = cpuRatio(rd.Replay[Ours], rd.Replay[Limit])
			rd.ReplayExtraCPUUS = round1(rd.Replay[Ours].CPUUS + rd.Replay[Ours].RedisCPUUS - rd.Replay[Limit].CPUUS - rd.Replay[Limit].RedisCPUUS)
			rd.ReplayOursLimit = ratio(rd.Replay[Ours].RPS, rd.Replay[Limit].RPS)
			rd.ReplayOursLimitFirst = ratio(rd.Replay[Ours].RPS, rd.First[Limit].RPS)
			rd.ReplayOursBare = ratio(rd.Replay[Ours].RPS, rd.First[Bare].RPS)
		}
		if r.cfg.has(PhaseStorm) {
			rd.Storm = map[string]*StormResult{}
			for _, n := range rd.Order {
				c := r.cs[n]
				s, err := r.storm(ctx, n, c.url(paymentPath), c.storms, []*app{c.app}, 1, 1)
				if err != nil {
					return err
				}
				rd.Storm[n] = s
			}
		}
		r.res.Rounds = append(r.res.Rounds, rd)
		r.log("round %d/%d (%s): %s", i+1, r.cfg.Rounds, strings.Join(rd.Order, ","), roundLine(&rd))
	}
	r.medians()
	return nil
}

func roundLine(rd *Round) string {
	var parts []string
	if len(rd.First) > 0 {
		parts = append(parts, fmt.Sprintf("first bare %.0f, limit %.0f, ours %.0f req/s (ours/limit %.3f, by CPU %.3f, +%.1fµs; ours/bare %.3f)",
			rd.First[Bare].RPS, rd.First[Limit].RPS, rd.First[Ours].RPS, rd.FirstOursLimit, rd.FirstOursLimitCPU, rd.FirstExtraCPUUS, rd.FirstOursBare))
	}
	if len(rd.Replay) > 0 {
		parts = append(parts, fmt.Sprintf("replay limit %.0f, ours %.0f req/s", rd.Replay[Limit].RPS, rd.Replay[Ours].RPS))
	}
	if s := rd.Storm[Ours]; s != nil {
		parts = append(parts, fmt.Sprintf("storm ours %s, %d executions, p99 %.1fms", s.Verdict, s.HandlerExecutions, s.P99MS))
	}
	return strings.Join(parts, "; ")
}

func (r *runner) medians() {
	m := &r.res.Median
	col := func(f func(*Round) float64) float64 {
		var v []float64
		for i := range r.res.Rounds {
			v = append(v, f(&r.res.Rounds[i]))
		}
		return median(v)
	}
	names := []string{Bare, Limit, Ours}
	if r.cfg.has(PhaseFirst) {
		m.FirstRPS = map[string]float64{}
		for _, n := range names {
			m.FirstRPS[n] = round1(col(func(rd *Round) float64 { return rd.First[n].RPS }))
		}
		m.FirstOursLimit = col(func(rd *Round) float64 { return rd.FirstOursLimit })
		m.FirstOursBare = col(func(rd *Round) float64 { return rd.FirstOursBare })
		m.FirstLimitBare = col(func(rd *Round) float64 { return rd.FirstLimitBare })
		m.FirstCPUUS, m.FirstRedisCPUUS = map[string]float64{}, map[string]float64{}
		for _, n := range names {
			m.FirstCPUUS[n] = round1(col(func(rd *Round) float64 { return rd.First[n].CPUUS }))
			m.FirstRedisCPUUS[n] = round1(col(func(rd *Round) float64 { return rd.First[n].RedisCPUUS }))
		}
		m.FirstOursLimitCPU = col(func(rd *Round) float64 { return rd.FirstOursLimitCPU })
		m.FirstExtraCPUUS = round1(col(func(rd *Round) float64 { return rd.FirstExtraCPUUS }))
	}
	if r.cfg.has(PhaseReplay) {
		m.ReplayRPS = map[string]float64{}
		for _, n := range []string{Limit, Ours} {
			m.ReplayRPS[n] = round1(col(func(rd *Round) float64 { return rd.Replay[n].RPS }))
		}
		m.ReplayOursLimit = col(func(rd *Round) float64 { return rd.ReplayOursLimit })
		m.ReplayOursLimitFirst = col(func(rd *Round) float64 { return rd.ReplayOursLimitFirst })
		m.ReplayOursBare = col(func(rd *Round) float64 { return rd.ReplayOursBare })
		m.ReplayCPUUS, m.ReplayRedisCPUUS = map[string]float64{}, map[string]float64{}
		for _, n := range []string{Limit, Ours} {
			m.ReplayCPUUS[n] = round1(col(func(rd *Round) float64 { return rd.Replay[n].CPUUS }))
			m.ReplayRedisCPUUS[n] = round1(col(func(rd *Round) float64 { return rd.Replay[n].RedisCPUUS }))
		}
		m.ReplayOursLimitCPU = col(func(rd *Round) float64 { return rd.ReplayOursLimitCPU })
		m.ReplayExtraCPUUS = round1(col(func(rd *Round) float64 { return rd.ReplayExtraCPUUS }))
	}
	if r.cfg.has(PhaseStorm) {
		m.StormP50MS, m.StormP99MS, m.StormRPS = map[string]float64{}, map[string]float64{}, map[string]float64{}
		for _, n := range names {
			m.StormP50MS[n] = col(func(rd *Round) float64 { return rd.Storm[n].P50MS })
			m.StormP99MS[n] = col(func(rd *Round) float64 { return rd.Storm[n].P99MS })
			m.StormRPS[n] = round1(col(func(rd *Round) float64 { return rd.Storm[n].RPS }))
		}
	}
}

// storm runs one retry storm against url and counts, on the server side,
// the executions of each key across apps.
func (r *runner) storm(ctx context.Context, name, url string, client *http.Client, apps []*app, instances, masters int) (*StormResult, error) {
	counter := loadgen.NewExecCounter()
	for _, a := range apps {
		a.counter.Store(counter)
	}
	rep, err := storm.Run(ctx, storm.Config{
		URL: url, Keys: r.cfg.StormKeys, Dups: r.cfg.StormDups, Concurrency: r.cfg.StormConcurrency,
		Client: client, MaxFailures: -1, KeyPrefix: r.nonce + "-storm-",
		BodyFor: func(_ string, i int) []byte {
			return fmt.Appendf(nil, `{"amount":%d,"currency":"eur"}`, 100+i)
		},
	})
	for _, a := range apps {
		a.counter.Store(nil)
	}
	if err != nil {
		return nil, fmt.Errorf("storm %s: %w", name, err)
	}
	s := &StormResult{
		Contender: name, Instances: instances, Masters: masters,
		Keys: rep.Keys, Dups: rep.Dups, Concurrency: rep.Concurrency, Requests: rep.Requests,
		Verdict: rep.Verdict(), KeysFailed: rep.KeysFailed,
		Originals: rep.Originals, Replays: rep.Replays, InProgress: rep.InProgress, Errors: rep.Errors,
		Status: rep.StatusCounts, RPS: round1(rep.Throughput()),
		P50MS: ms(rep.Latency.P50), P99MS: ms(rep.Latency.P99),
	}
	s.HandlerExecutions, s.KeysExecuted, s.ExecutionsMax, s.KeysExecutedMoreThanOnce = counter.Summary()
	for _, f := range rep.Failures {
		// storm documents this marker for keys whose clients got
		// different final responses.
		if strings.Contains(f.Reason, "divergent:") {
			s.DivergentKeys++
		}
	}
	return s, nil
}

// twoInstances storms ours on two Gin instances that share the Redis, each
// with its own client and middleware, as two processes would.
func (r *runner) twoInstances(ctx context.Context) (*StormResult, error) {
	var apps []*app
	var hosts []string
	for range 2 {
		client := newRedisClient(r.redis.Addr())
		defer client.Close()
		store, err := redisstore.New(client, redisstore.Options{})
		if err != nil {
			return nil, err
		}
		a := &app{}
		srv, err := serve(oursEngine(a, store))
		if err != nil {
			return nil, err
		}
		defer srv.close()
		apps = append(apps, a)
		hosts = append(hosts, strings.TrimPrefix(srv.url, "http://"))
	}
	hc := loadgen.NewClient(r.cfg.StormConcurrency)
	defer hc.CloseIdleConnections()
	hc.Transport = &roundRobin{next: hc.Transport, hosts: hosts}
	r.log("storm: ours on two instances, %d keys x %d dups, concurrency %d", r.cfg.StormKeys, r.cfg.StormDups, r.cfg.StormConcurrency)
	return r.storm(ctx, Ours, "http://"+hosts[0]+paymentPath, hc, apps, 2, 1)
}

// cluster storms ours on a Redis Cluster: the same middleware, a
// redis.ClusterClient in place of a redis.Client.
func (r *runner) cluster(ctx context.Context) error {
	r.log("cluster: starting %d masters", r.cfg.Masters)
	cl, err := redistest.LaunchCluster(filepath.Join(r.dir, "cluster"), r.cfg.Masters)
	if err != nil {
		return err
	}
	defer cl.Close()
	client := redis.NewClusterClient(cl.Options())
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		return err
	}
	a := &app{}
	srv, err := serve(oursEngine(a, store))
	if err != nil {
		return err
	}
	defer srv.close()
	hc := loadgen.NewClient(r.cfg.StormConcurrency)
	defer hc.CloseIdleConnections()
	r.log("storm: ours on the cluster, %d keys x %d dups, concurrency %d", r.cfg.StormKeys, r.cfg.StormDups, r.cfg.StormConcurrency)
	s, err := r.storm(ctx, Ours, srv.url+paymentPath, hc, []*app{a}, 1, cl.Masters())
	if err != nil {
		return err
	}
	res := &Cluster{Masters: cl.Masters(), Storm: s}
	for i := range cl.Masters() {
		nc := redis.NewClient(cl.Node(i).Options())
		n, err := nc.DBSize(ctx).Result()
		_ = nc.Close()
		if err != nil {
			return err
		}
		res.RecordsPerMaster = append(res.RecordsPerMaster, n)
	}
	r.res.Cluster = res
	return nil
}
