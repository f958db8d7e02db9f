package bench

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

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
