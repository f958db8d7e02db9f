package bench

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The generator comparison's harness: both generators send what they were
// asked to, the handler counts the connections they dialed, and the table
// shows storm's CPU ratio.
func TestGenerators(t *testing.T) {
	url, err := ServeTrivial(t.Context())
	require.NoError(t, err)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	conns := func() int {
		resp, err := client.Get(strings.TrimSuffix(url, "/v1/payments") + ConnsPath)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		n, err := strconv.Atoi(string(b))
		require.NoError(t, err)
		return n
	}
	for _, run := range []func() (GenResult, error){
		func() (GenResult, error) { return RunStormGen(t.Context(), url, 200, 300*time.Millisecond) },
		func() (GenResult, error) { return RunVegetaGen(t.Context(), url, 200, 300*time.Millisecond, false) },
		func() (GenResult, error) { return RunVegetaGen(t.Context(), url, 200, 300*time.Millisecond, true) },
	} {
		before := conns()
		r, err := run()
		require.NoError(t, err)
		if r.Generator == "storm" {
			require.Equal(t, 60, r.Sent, "storm sends every operation scheduled, late if need be")
		} else {
			// vegeta stops at the duration: on a busy machine the last
			// tick or two may not have been sent by then.
			require.InDelta(t, 57, r.Sent, 3, r.Generator)
		}
		require.Zero(t, r.Errors, r.Generator)
		require.Positive(t, r.Achieved, r.Generator)
		require.Positive(t, r.Throughput, r.Generator)
		dialed := conns() - before - 1 // the count's own connection
		require.Positive(t, dialed, r.Generator)
		require.LessOrEqual(t, dialed, GenConnections, r.Generator)
	}
	floor, err := RunFloor(t.Context(), 200, 300*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, 60, floor.Sent)
	require.Positive(t, floor.Achieved)
	require.LessOrEqual(t, floor.LagP50, floor.LagP99)

	table := GenTable([]GenRow{
		{GenResult: GenResult{Generator: "storm", Rate: 1000, Sent: 5000, Achieved: 999, Throughput: 998, Conns: 3}, CPUPerRequest: 60 * time.Microsecond, VegetaCPU: 50 * time.Microsecond},
		{GenResult: GenResult{Generator: "vegeta", Rate: 1000, Sent: 5000, Achieved: 999}, CPUPerRequest: 50 * time.Microsecond},
	})
	require.Contains(t, table, "| 1000/s | storm | 5000 | 0.9990 | 0.9980 |")
	require.Contains(t, table, "**1.20**")
	require.Equal(t, 4, strings.Count(table, "\n"))
}

// The summary says per goal whether the medians met it.
func TestGenGoals(t *testing.T) {
	row := func(gen string, rate, achieved, answered float64, lag, cpu, vegeta time.Duration) GenRow {
		return GenRow{GenResult: GenResult{Generator: gen, Rate: rate, Achieved: achieved, Throughput: answered, LagP99: lag},
			CPUPerRequest: cpu, VegetaCPU: vegeta}
	}
	us := time.Microsecond
	rows := []GenRow{
		row("storm", 1000, 999.9, 999.5, 3*time.Millisecond, 100*us, 110*us),
		row("vegeta", 1000, 999.8, 999.4, 4*time.Millisecond, 110*us, 0),
		row("storm", 6000, 5990, 5980, time.Second, 60*us, 55*us),
		row("vegeta", 6000, 5995, 5990, time.Second, 55*us, 0),
		row("storm", 8000, 7000, 6000, time.Second, 70*us, 50*us),
		row("vegeta", 8000, 7990, 7500, time.Second, 50*us, 0),
	}
	rows[0].FloorP99, rows[0].LagOverFloor = 2500*us, 500*us
	rows[1].FloorP99, rows[1].LagOverFloor = 2500*us, 1500*us
	got := GenGoals(rows)
	require.Contains(t, got, "- CPU per attempt <= 1.2 x vegeta's: not met (storm / vegeta: 0.91 at 1000/s, 1.09 at 6000/s, 1.40 at 8000/s)")
	require.Contains(t, got, "sustained (started and answered within 1 %): met: storm sustained up to 6000/s, vegeta up to 6000/s")
	require.Contains(t, got, "- at 1000/s, achieved within 1 %: met (0.9999 of target)")
	require.Contains(t, got, "- at 1000/s, start lag p99 <= 5ms: met (storm 3ms, vegeta 4ms; attempt latency p99 0s)")
	require.Contains(t, got, "had p99 2.5ms: storm's own share, its p99 less the floor's, 500µs (vegeta's 1.5ms)")

	rows[0].LagP99, rows[2].Throughput = 9*time.Millisecond, 5000
	got = GenGoals(rows[:4])
	require.Contains(t, got, "CPU per attempt <= 1.2 x vegeta's: met")
	require.Contains(t, got, "sustained (started and answered within 1 %): not met: storm sustained up to 1000/s, vegeta up to 6000/s")
	require.Contains(t, got, "start lag p99 <= 5ms: not met (storm 9ms")
	require.Contains(t, GenGoals(rows[:2]), "sustained: not measured (rates up to 1000/s)")
}
