package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/idemkey/idemkey/idemclient"
	"github.com/idemkey/idemkey/storm"
)

// The generator comparison: storm's load mode against vegeta's
// attack, at the same rate, on the same requests (POST, a small JSON body,
// a fresh Idempotency-Key each), against a trivial handler. cmd/stormgen
// runs each generator in a process of its own and measures its CPU.

// GenBody is the request body both generators send.
const GenBody = `{"amount":1250,"currency":"eur"}`

// GenConnections bounds each generator's connections to the handler (storm's
// MaxInFlight, vegeta's MaxConnections): a generator that falls behind then
// waits for a connection instead of dialing thousands, which would leave
// the machine's ephemeral ports in TIME-WAIT for every other process on it
// (it did, once, unbounded).
const GenConnections = 512

// GenResult is what one generator run achieved.
type GenResult struct {
	// Generator is "storm", "vegeta", "vegeta-nobind", "floor", or the
	// name of a storm build cmd/stormgen compares.
	Generator string `json:"generator"`
	// Rate is the target, in requests per second.
	Rate float64 `json:"rate"`
	// Duration is the schedule's length.
	Duration time.Duration `json:"duration_ns"`
	// Sent counts the requests sent.
	Sent int `json:"sent"`
	// Errors counts the requests without a 201.
	Errors int `json:"errors"`
	// Achieved is requests started per second over the schedule as it
	// ran: from the start to the last request's start, plus one interval.
	// Each generator takes the start where it records it: storm once an
	// attempt has one of its MaxInFlight slots, vegeta when a worker
	// picks up a tick, before its client waits for a connection.
	Achieved float64 `json:"achieved"`
	// Throughput is requests answered per second, from the start to the
	// last answer: the same measure for every generator, and what a
	// server sees. A generator sustains a rate when both Achieved and
	// Throughput are within 1 % of it.
	Throughput float64 `json:"throughput"`
	// LagP50 and LagP99 are percentiles of the delay from a request's
	// scheduled start to its start (as Achieved takes it).
	LagP50 time.Duration `json:"lag_p50_ns"`
	LagP99 time.Duration `json:"lag_p99_ns"`
	// LatencyP99 is the p99 of the requests' latency.
	LatencyP99 time.Duration `json:"latency_p99_ns"`
	// Conns is the number of connections the handler accepted during the
	// run (set by cmd/stormgen, from ConnsPath).
	Conns int `json:"conns"`
}

// TrivialHandler answers every request 201 with a small JSON body, after
// reading the request's.
func TrivialHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"pay_1","status":"captured","amount":1250,"currency":"eur"}`)
	})
}

// RunStormGen runs storm's load mode at rate for d against url: one
// attempt per operation (the handler answers 201 at once), no late probe,
// GenConnections slots.
func RunStormGen(ctx context.Context, url string, rate float64, d time.Duration) (GenResult, error) {
	rep, err := storm.Run(ctx, storm.Config{
		URL: url, Body: []byte(GenBody), Rate: rate, Duration: d, NoProbe: true,
		MaxInFlight: GenConnections, Timeout: 30 * time.Second,
	})
	if err != nil {
		return GenResult{}, err
	}
	ld := rep.Load
	r := GenResult{
		Generator: "storm", Rate: rate, Duration: d, Sent: ld.Attempts,
		Errors:   ld.Attempts - rep.StatusCounts[http.StatusCreated],
		Achieved: ld.AchievedRate, LagP50: ld.StartLag.P50, LagP99: ld.StartLag.P99,
		LatencyP99: ld.AttemptLatency.P99,
	}
	if rep.Elapsed > 0 {
		r.Throughput = float64(ld.Attempts) / rep.Elapsed.Seconds()
	}
	return r, nil
}

// RunVegetaGen runs vegeta's attack at rate for d against url, each
// request with a fresh key. Its results are read as cheaply as storm keeps
// its own (status, start, latency, into slices sorted once at the end),
// not into vegeta's Metrics or an encoder: vegeta's side of the
// comparison does the least work it can.
//
// With noBind, vegeta sends through a client of the bench's own (net/http's
// defaults, GenConnections keep-alive connections) instead of its
// default dialer, which binds every new connection to its local address
// (-laddr, 0.0.0.0): once vegeta falls behind it dials a connection per new
// worker, and on a machine with many sockets that bind() is most of its
// CPU (RESULTS.md).
func RunVegetaGen(ctx context.Context, url string, rate float64, d time.Duration, noBind bool) (GenResult, error) {
	hdr := http.Header{"Content-Type": {"application/json"}}
	targeter := func(t *vegeta.Target) error {
		*t = vegeta.Target{Method: http.MethodPost, URL: url, Body: []byte(GenBody), Header: hdr.Clone()}
		t.Header.Set(idemclient.HeaderKey, idemclient.NewKey())
		return nil
	}
	opts := []func(*vegeta.Attacker){vegeta.Timeout(30 * time.Second), vegeta.MaxConnections(GenConnections)}
	name := "vegeta"
	if noBind {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost = 0, GenConnections, GenConnections
		opts = append(opts, vegeta.Client(&http.Client{Timeout: 30 * time.Second, Transport: tr}))
		name = "vegeta-nobind"
	}
	atk := vegeta.NewAttacker(opts...)
	pacer := vegeta.ConstantPacer{Freq: int(rate), Per: time.Second}
	var lags, lats []time.Duration
	sent, created := 0, 0
	begin := time.Now()
	every := float64(time.Second) / rate
	var last, end time.Duration
	for res := range atk.Attack(targeter, pacer, d, "stormgen") {
		sent++
		if res.Code == http.StatusCreated {
			created++
		}
		lats = append(lats, res.Latency)
		off := res.Timestamp.Sub(begin)
		lags = append(lags, max(0, off-time.Duration(float64(res.Seq)*every)))
		last, end = max(last, off), max(end, off+res.Latency)
		if ctx.Err() != nil {
			atk.Stop()
		}
	}
	if ctx.Err() != nil {
		return GenResult{}, ctx.Err()
	}
	r := GenResult{Generator: name, Rate: rate, Duration: d, Sent: sent, Errors: sent - created}
	if n := len(lags); n > 0 {
		r.LagP50, r.LagP99 = p(lags, 50), p(lags, 99)
		r.LatencyP99 = p(lats, 99)
		r.Achieved = float64(n) / (last + time.Duration(every)).Seconds()
		r.Throughput = float64(n) / end.Seconds()
	}
	return r, nil
}

// RunFloor is the floor of the start lag on this machine: a pacer that
// sleeps on one timer until each tick is due, as storm's does, and sends
// nothing. Its lag is the time the process took to run once its timer
// fired (timer granularity, the kernel's scheduling, the runtime's): what
// no generator in the same place can do better than.
func RunFloor(ctx context.Context, rate float64, d time.Duration) (GenResult, error) {
	every := float64(time.Second) / rate
	n := int(math.Ceil(rate * d.Seconds()))
	lags := make([]time.Duration, 0, n)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	begin := time.Now()
	var last time.Duration
	for i := range n {
		due := time.Duration(float64(i) * every)
		if wait := time.Until(begin.Add(due)); wait > 50*time.Microsecond {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return GenResult{}, ctx.Err()
			}
		}
		last = time.Since(begin)
		lags = append(lags, max(0, last-due))
	}
	r := GenResult{Generator: "floor", Rate: rate, Duration: d, Sent: n}
	r.Achieved = float64(n) / (last + time.Duration(every)).Seconds()
	r.Throughput = r.Achieved
	r.LagP50, r.LagP99 = p(lags, 50), p(lags, 99)
	return r, nil
}

// p returns the nearest-rank q-th percentile of ds, sorting it.
func p(ds []time.Duration, q int) time.Duration {
	slices.Sort(ds)
	return ds[max(0, min(len(ds)-1, (len(ds)*q+99)/100-1))]
}

// ConnsPath is where ServeTrivial's server answers the number of
// connections it has accepted so far, as a decimal number.
const ConnsPath = "/stormgen/conns"

// ServeTrivial serves TrivialHandler on a free loopback port until ctx
// ends, and returns its base URL. GET ConnsPath on the same host answers
// the connections accepted so far: what a generator dialed.
func ServeTrivial(ctx context.Context) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	var conns atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("/", TrivialHandler())
	mux.HandleFunc("GET "+ConnsPath, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, conns.Load())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return "http://" + ln.Addr().String() + "/v1/payments", nil
}

// GenTable renders side-by-side rows as Markdown: per rate, each
// generator's medians and the CPU ratio.
func GenTable(rows []GenRow) string {
	var b strings.Builder
	b.WriteString("| target rate | generator | sent | achieved / target | answered / target | start lag p50 / p99 | floor beside: p99 | connections | CPU per request | CPU ratio to vegeta | peak RSS |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		ratio, floor := "", ""
		if r.VegetaCPU > 0 {
			ratio = fmt.Sprintf("**%.2f**", float64(r.CPUPerRequest)/float64(r.VegetaCPU))
		}
		if r.FloorP99 > 0 {
			floor = r.FloorP99.Round(time.Microsecond).String()
		}
		fmt.Fprintf(&b, "| %.0f/s | %s | %d | %.4f | %.4f | %s / %s | %s | %d | %.1f µs | %s | %.0f MiB |\n", r.Rate, r.Generator, r.Sent,
			r.Achieved/r.Rate, r.Throughput/r.Rate, r.LagP50.Round(time.Microsecond), r.LagP99.Round(time.Microsecond),
			floor, r.Conns, float64(r.CPUPerRequest)/float64(time.Microsecond), ratio, float64(r.MaxRSS)/(1<<20))
	}
	return b.String()
}

// GenRow is one generator's medians at one rate, over the rounds.
type GenRow struct {
	GenResult
	// CPUPerRequest is the generator process's CPU time (user and system)
	// per request sent.
	CPUPerRequest time.Duration
	// VegetaCPU is vegeta's CPUPerRequest at the same rate, on storm's row.
	VegetaCPU time.Duration
	// MaxRSS is the process's peak resident memory, in bytes.
	MaxRSS int64
	// FloorP99 is the start lag p99 of a floor (RunFloor) run beside the
	// generator, on its CPU at the same time: the machine's share of the
	// generator's. Zero when none ran.
	FloorP99 time.Duration
	// LagOverFloor is the median, over the rounds, of the generator's
	// start lag p99 less the floor's beside it: the generator's own share.
	LagOverFloor time.Duration
}

// Sustained reports whether the row kept to its rate: requests started
// and answered both within 1 % of it.
func (r GenRow) Sustained() bool {
	return r.Achieved >= 0.99*r.Rate && r.Throughput >= 0.99*r.Rate
}

// The goals for the generator's speed.
const (
	goalCPURatio = 1.2
	goalRate     = 5000
	goalLagRate  = 1000
	goalLagP99   = 5 * time.Millisecond
)

// GenGoals says, from GenTable's rows, which of the goals for the
// generator the run met: storm's CPU per attempt against vegeta's, the
// highest rate storm sustained, and at 1,000/s its achieved rate and start
// lag, the latter beside vegeta's and beside the floor's (RunFloor), the
// machine's share of it.
func GenGoals(rows []GenRow) string {
	find := func(gen string, rate float64) (GenRow, bool) {
		for _, r := range rows {
			if r.Generator == gen && r.Rate == rate {
				return r, true
			}
		}
		return GenRow{}, false
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "not met"
	}
	var b strings.Builder
	b.WriteString("Goals, from the medians above:\n")

	var ratios []string
	cpuOK, any := true, false
	for _, r := range rows {
		if r.Generator == "storm" && r.VegetaCPU > 0 {
			x := float64(r.CPUPerRequest) / float64(r.VegetaCPU)
			cpuOK, any = cpuOK && x <= goalCPURatio, true
			ratios = append(ratios, fmt.Sprintf("%.2f at %.0f/s", x, r.Rate))
		}
	}
	if any {
		fmt.Fprintf(&b, "- CPU per attempt <= %.1f x vegeta's: %s (storm / vegeta: %s)\n", goalCPURatio, verdict(cpuOK), strings.Join(ratios, ", "))
	} else {
		b.WriteString("- CPU per attempt: not measured (no storm and vegeta at the same rate)\n")
	}

	best := map[string]float64{}
	top := 0.0
	for _, r := range rows {
		top = max(top, r.Rate)
		if r.Sustained() {
			best[r.Generator] = max(best[r.Generator], r.Rate)
		}
	}
	switch {
	case top < goalRate:
		fmt.Fprintf(&b, "- >= %d attempts/s sustained: not measured (rates up to %.0f/s)\n", goalRate, top)
	default:
		fmt.Fprintf(&b, "- >= %d attempts/s sustained (started and answered within 1 %%): %s: storm sustained %s, vegeta %s\n",
			goalRate, verdict(best["storm"] >= goalRate), upTo(best["storm"]), upTo(best["vegeta"]))
	}

	s, ok := find("storm", goalLagRate)
	if !ok {
		fmt.Fprintf(&b, "- at %d/s: not measured\n", goalLagRate)
		return b.String()
	}
	within := math.Abs(s.Achieved/s.Rate-1) <= 0.01
	fmt.Fprintf(&b, "- at %d/s, achieved within 1 %%: %s (%.4f of target)\n", goalLagRate, verdict(within), s.Achieved/s.Rate)
	ms := func(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }
	fmt.Fprintf(&b, "- at %d/s, start lag p99 <= %s: %s (storm %s", goalLagRate, goalLagP99, verdict(s.LagP99 <= goalLagP99), ms(s.LagP99))
	if v, ok := find("vegeta", goalLagRate); ok {
		fmt.Fprintf(&b, ", vegeta %s", ms(v.LagP99))
	}
	fmt.Fprintf(&b, "; attempt latency p99 %s)\n", ms(s.LatencyP99))
	if s.FloorP99 > 0 {
		// The machine's share: what a pacer that sends nothing got on
		// the same CPU at the same time.
		fmt.Fprintf(&b, "  beside it a floor (a pacer that sends nothing, same CPU, same time) had p99 %s: storm's own share, its p99 less the floor's, %s", ms(s.FloorP99), ms(s.LagOverFloor))
		if v, ok := find("vegeta", goalLagRate); ok && v.FloorP99 > 0 {
			fmt.Fprintf(&b, " (vegeta's %s)", ms(v.LagOverFloor))
		}
		b.WriteString(" (medians over the rounds)\n")
	}
	return b.String()
}

func upTo(rate float64) string {
	if rate == 0 {
		return "none of the rates"
	}
	return fmt.Sprintf("up to %.0f/s", rate)
}
