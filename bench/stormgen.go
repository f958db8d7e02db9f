package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/idemkey/idemkey/idemclient"
	"github.com/idemkey/idemkey/internal/storm"
)

// The generator comparison of issue 28: storm's load mode against vegeta's
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
	// Generator is "storm" or "vegeta".
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
	Achieved float64 `json:"achieved"`
	// LagP50 and LagP99 are percentiles of the delay from a request's
	// scheduled start to its sending.
	LagP50 time.Duration `json:"lag_p50_ns"`
	LagP99 time.Duration `json:"lag_p99_ns"`
	// LatencyP99 is the p99 of the requests' latency.
	LatencyP99 time.Duration `json:"latency_p99_ns"`
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
// attempt per operation (the handler answers 201 at once), no late probe.
func RunStormGen(ctx context.Context, url string, rate float64, d time.Duration) (GenResult, error) {
	rep, err := storm.Run(ctx, storm.Config{
		URL: url, Body: []byte(GenBody), Rate: rate, Duration: d, NoProbe: true,
		MaxInFlight: 1000, Timeout: 30 * time.Second,
	})
	if err != nil {
		return GenResult{}, err
	}
	ld := rep.Load
	return GenResult{
		Generator: "storm", Rate: rate, Duration: d, Sent: ld.Attempts,
		Errors:   ld.Attempts - rep.StatusCounts[http.StatusCreated],
		Achieved: ld.AchievedRate, LagP50: ld.StartLag.P50, LagP99: ld.StartLag.P99,
		LatencyP99: ld.AttemptLatency.P99,
	}, nil
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
	var last time.Duration
	for res := range atk.Attack(targeter, pacer, d, "stormgen") {
		sent++
		if res.Code == http.StatusCreated {
			created++
		}
		lats = append(lats, res.Latency)
		off := res.Timestamp.Sub(begin)
		lags = append(lags, max(0, off-time.Duration(float64(res.Seq)*every)))
		last = max(last, off)
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
	}
	return r, nil
}

// p returns the nearest-rank q-th percentile of ds, sorting it.
func p(ds []time.Duration, q int) time.Duration {
	slices.Sort(ds)
	return ds[max(0, min(len(ds)-1, (len(ds)*q+99)/100-1))]
}

// ServeTrivial serves TrivialHandler on a free loopback port until ctx
// ends, and returns its base URL.
func ServeTrivial(ctx context.Context) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: TrivialHandler(), ReadHeaderTimeout: 10 * time.Second}
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
	b.WriteString("| target rate | generator | sent | achieved / target | start lag p50 / p99 | CPU per request | CPU ratio storm / vegeta | peak RSS |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		ratio := ""
		if r.Generator == "storm" && r.VegetaCPU > 0 {
			ratio = fmt.Sprintf("**%.2f**", float64(r.CPUPerRequest)/float64(r.VegetaCPU))
		}
		fmt.Fprintf(&b, "| %.0f/s | %s | %d | %.4f | %s / %s | %.1f µs | %s | %.0f MiB |\n", r.Rate, r.Generator, r.Sent,
			r.Achieved/r.Rate, r.LagP50.Round(time.Microsecond), r.LagP99.Round(time.Microsecond),
			float64(r.CPUPerRequest)/float64(time.Microsecond), ratio, float64(r.MaxRSS)/(1<<20))
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
}
