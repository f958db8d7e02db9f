package bench

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/internal/loadgen"
)

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
	names := r.names
	defs := ratioDefs(names)
	warm := min(r.cfg.Duration/2, 500*time.Millisecond)
	r.log("warm-up: %s of first executions per contender", warm)
	for _, n := range names {
		if _, err := r.first(ctx, r.cs[n], "warm", warm); err != nil {
			return err
		}
	}
	if r.cfg.has(PhaseReplay) {
		for _, n := range names {
			if n == Bare {
				continue
			}
			if err := r.populate(ctx, r.cs[n]); err != nil {
				return err
			}
		}
		r.log("stored %d replay keys per contender", r.cfg.ReplayKeys)
	}
	for i := range r.cfg.Rounds {
		var rd Round
		for k := range names {
			rd.Order = append(rd.Order, names[(i+k)%len(names)])
		}
		phase := "r" + strconv.Itoa(i)
		if r.cfg.has(PhaseFirst) {
			rd.First = map[string]Load{}
			for _, n := range rd.Order {
				l, err := r.timed(ctx, func() (*loadgen.Result, error) { return r.first(ctx, r.cs[n], phase, r.cfg.Duration) })
				if err != nil {
					return err
				}
				rd.First[n] = l
			}
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
		}
		if r.cfg.has(PhaseStorm) {
			rd.Storm = map[string]*StormResult{}
			for _, n := range rd.Order {
				c := r.cs[n]
				s, err := r.storm(ctx, n, c.url(paymentPath), c.storms, []*app{c.app}, []*cmdCounter{c.count}, []*redis.Client{r.admin}, 1, 1)
				if err != nil {
					return err
				}
				rd.Storm[n] = s
			}
		}
		rd.ratios(defs)
		r.res.Rounds = append(r.res.Rounds, rd)
		r.log("round %d/%d (%s): %s", i+1, r.cfg.Rounds, strings.Join(rd.Order, ","), roundLine(&rd, names))
	}
	r.medians()
	return nil
}

// roundLine is the progress line of a round.
func roundLine(rd *Round, names []string) string {
	var parts []string
	for _, ph := range []struct {
		name  string
		loads map[string]Load
	}{{"first", rd.First}, {"replay", rd.Replay}} {
		if len(ph.loads) == 0 {
			continue
		}
		var f []string
		for _, n := range names {
			if l, ok := ph.loads[n]; ok {
				f = append(f, fmt.Sprintf("%s %.0f", n, l.RPS))
			}
		}
		parts = append(parts, ph.name+" req/s: "+strings.Join(f, ", "))
	}
	for _, name := range []string{ratioName(PhaseFirst, Ours, PhaseFirst, Floor), ratioName(PhaseFirst, Ours, PhaseFirst, Limit),
		ratioName(PhaseReplay, Ours, PhaseReplay, Floor)} {
		if v, ok := rd.Ratios[name]; ok {
			parts = append(parts, fmt.Sprintf("%s %.3f (by CPU %.3f)", name, v, rd.CPURatios[name]))
		}
	}
	if s := rd.Storm[Ours]; s != nil {
		parts = append(parts, fmt.Sprintf("storm ours %s, %d executions, p99 %.1fms, %.2f commands per key", s.Verdict, s.HandlerExecutions, s.P99MS, s.Server.Total))
	}
	return strings.Join(parts, "; ")
}

// medians fills r.res.Median from the rounds.
func (r *runner) medians() {
	m := &r.res.Median
	rounds := r.res.Rounds
	col := func(f func(*Round) (float64, bool)) float64 {
		var v []float64
		for i := range rounds {
			if x, ok := f(&rounds[i]); ok {
				v = append(v, x)
			}
		}
		return median(v)
	}
	loads := func(get func(*Round) map[string]Load) map[string]Load {
		out := map[string]Load{}
		for _, n := range r.names {
			if _, ok := get(&rounds[0])[n]; !ok {
				continue
			}
			f := func(field func(Load) float64) float64 {
				return col(func(rd *Round) (float64, bool) { l, ok := get(rd)[n]; return field(l), ok })
			}
			out[n] = Load{
				RPS: round1(f(func(l Load) float64 { return l.RPS })), P50MS: f(func(l Load) float64 { return l.P50MS }),
				P99MS: f(func(l Load) float64 { return l.P99MS }), Requests: int(f(func(l Load) float64 { return float64(l.Requests) })),
				Errors: int(f(func(l Load) float64 { return float64(l.Errors) })),
				CPUUS:  round1(f(func(l Load) float64 { return l.CPUUS })), RedisCPUUS: round1(f(func(l Load) float64 { return l.RedisCPUUS })),
			}
		}
		return out
	}
	if len(rounds) == 0 {
		return
	}
	if rounds[0].First != nil {
		m.First = loads(func(rd *Round) map[string]Load { return rd.First })
	}
	if rounds[0].Replay != nil {
		m.Replay = loads(func(rd *Round) map[string]Load { return rd.Replay })
	}
	if rounds[0].Storm != nil {
		m.Storm = map[string]StormMedian{}
		for _, n := range r.names {
			f := func(field func(*StormResult) float64) float64 {
				return col(func(rd *Round) (float64, bool) {
					s := rd.Storm[n]
					if s == nil {
						return 0, false
					}
					return field(s), true
				})
			}
			m.Storm[n] = StormMedian{
				RPS: round1(f(func(s *StormResult) float64 { return s.RPS })), P50MS: f(func(s *StormResult) float64 { return s.P50MS }),
				P99MS: f(func(s *StormResult) float64 { return s.P99MS }), RoundTripsPerKey: f(func(s *StormResult) float64 { return s.RoundTripsPerKey }),
				CommandsPerKey: f(func(s *StormResult) float64 { return s.Server.Total }),
				ScriptsPerKey:  f(func(s *StormResult) float64 { return s.Server.TopLevel() }),
			}
		}
	}
	m.Ratios, m.CPURatios = map[string]float64{}, map[string]float64{}
	for _, d := range ratioDefs(r.names) {
		name := d.Name()
		if v := col(func(rd *Round) (float64, bool) { x, ok := rd.Ratios[name]; return x, ok }); v != 0 {
			m.Ratios[name] = round3(v)
		}
		if v := col(func(rd *Round) (float64, bool) { x, ok := rd.CPURatios[name]; return x, ok }); v != 0 {
			m.CPURatios[name] = round3(v)
		}
	}
}
