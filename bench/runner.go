package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/internal/loadgen"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

// firstBody is the request body of the throughput phases.
var firstBody = []byte(`{"amount":1250,"currency":"eur"}`)

// contender is one server of the contenders list with its own app, its own
// Redis client and its own keep-alive clients, as separate deployments would
// have.
type contender struct {
	name   string
	spec   spec
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
	names []string          // the contenders measured, in the first round's order
	cs    map[string]*contender
}

// Run makes every measurement cfg selects against private redis-servers it
// launches (and kills) itself, and returns the figures and checks.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	r := &runner{cfg: cfg, names: cfg.contenders(), cs: map[string]*contender{}}
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

// ours returns the names of ours and its variants among the contenders.
func (r *runner) ours() []string {
	var out []string
	for _, n := range r.names {
		if isOurs(n) {
			out = append(out, n)
		}
	}
	return out
}

func (r *runner) run(ctx context.Context) error {
	if r.cfg.has(PhaseFirst) || r.cfg.has(PhaseReplay) || r.cfg.has(PhaseStorm) {
		if err := r.rounds(ctx); err != nil {
			return err
		}
	}
	if r.cfg.has(PhaseStorm) {
		for _, n := range r.ours() {
			s, err := r.twoInstances(ctx, r.cs[n].spec)
			if err != nil {
				return err
			}
			r.res.StormTwoInstances = append(r.res.StormTwoInstances, s)
		}
	}
	if r.cfg.has(PhaseCost) {
		if err := r.cost(ctx); err != nil {
			return fmt.Errorf("cost: %w", err)
		}
	}
	if r.cfg.has(PhaseAllocs) {
		if err := r.allocs(ctx); err != nil {
			return fmt.Errorf("allocs: %w", err)
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

// setup launches redis-server and the contenders.
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
	r.log("redis-server %s on %s; contenders %s", r.res.Env.RedisVersion, srv.Addr(), strings.Join(r.names, ", "))

	for _, name := range r.names {
		sp, _ := specOf(name)
		c := &contender{name: name, spec: sp, app: &app{}, count: &cmdCounter{},
			load: loadgen.NewClient(r.cfg.Concurrency), storms: loadgen.NewClient(r.cfg.StormConcurrency)}
		r.cs[name] = c
		if sp.kind != kindBare {
			c.redis = newRedisClient(srv.Addr())
			c.redis.AddHook(c.count)
		}
		h, store, err := sp.handler(ctx, c.app, c.redis)
		if err != nil {
			return err
		}
		if name == Ours {
			r.store = store
		}
		if c.srv, err = serve(h); err != nil {
			return err
		}
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
	cpu0 := loadgen.ProcessCPU()
	rcpu0, err := redisCPU(ctx, r.admin)
	if err != nil {
		return Load{}, err
	}
	res, err := run()
	if err != nil {
		return Load{}, err
	}
	cpu := loadgen.ProcessCPU() - cpu0
	rcpu, err := redisCPU(ctx, r.admin)
	if err != nil {
		return Load{}, err
	}
	return loadOf(res, cpu, rcpu-rcpu0), nil
}
