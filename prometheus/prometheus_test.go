package prometheus

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/metrics"
	"github.com/idemkey/idemkey/internal/observetest"
	"github.com/idemkey/idemkey/observe"
	spec "github.com/idemkey/idemkey/observe/metrics"
)

// snapshot returns every series of reg, named as observetest.Series does;
// of a histogram only its _count.
func snapshot(t *testing.T, reg prom.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var pairs []string
			for _, l := range m.GetLabel() { // in name order
				pairs = append(pairs, l.GetName(), l.GetValue())
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[observetest.Series(mf.GetName(), pairs...)] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[observetest.Series(mf.GetName(), pairs...)] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[observetest.Series(mf.GetName()+"_count", pairs...)] = float64(m.GetHistogram().GetSampleCount())
			default:
				t.Fatalf("unexpected metric type %v of %s", mf.GetType(), mf.GetName())
			}
		}
	}
	return out
}

func requests(route, outcome string) string {
	return observetest.Series("idemkey_requests_total", "outcome", outcome, "route", route)
}

func calls(script string) string {
	return observetest.Series("idemkey_redis_seconds_count", "script", script)
}

const leases = observetest.Leases

// TestSequence drives the scripted sequence and asserts exactly which series
// each step changes, and by how much.
func TestSequence(t *testing.T) {
	reg := prom.NewRegistry()
	obs, err := New(Options{Registerer: reg})
	require.NoError(t, err)

	var before map[string]float64
	var ran []string
	observetest.Run(t, observetest.Config{
		Observer: obs,
		Before:   func(string) { before = snapshot(t, reg) },
		After: func(step string) {
			ran = append(ran, step)
			require.Equal(t, observetest.Want[step], observetest.Delta(before, snapshot(t, reg)), "step %q", step)
		},
	})
	require.Equal(t, observetest.Steps, ran)

	// The same totals through testutil, for one series of each metric.
	require.InDelta(t, 1.0, testutil.ToFloat64(obs.takeovers.WithLabelValues("POST /stall")), 0)
	require.InDelta(t, 1.0, testutil.ToFloat64(obs.fenced.WithLabelValues("POST /stall")), 0)
	require.InDelta(t, 2.0, testutil.ToFloat64(obs.requests.WithLabelValues("POST /stall", "executed")), 0)
	require.InDelta(t, 0.0, testutil.ToFloat64(obs.leases), 0)
}

// events feeds every kind of event and some calls to o.
func events(o observe.Observer) {
	ctx := context.Background()
	routes := []string{"POST /v1/payments", `POST /odd "quoted" \ back` + "\nslash", ""}
	for i, r := range routes {
		for k := observe.Claimed; k <= observe.Rejected; k++ {
			for range i + int(k)%3 + 1 {
				e := observe.NewEvent(k, "scope", "key")
				e.Route = r
				o.Event(ctx, &e)
			}
		}
	}
	for i, s := range []string{"claim", "complete", "release", "extend", "checkpoint", "lookup", "legacy"} {
		for j, d := range []time.Duration{50 * time.Microsecond, 100 * time.Microsecond, time.Duration(i+1) * time.Millisecond,
			2500 * time.Millisecond, 3 * time.Second} {
			if (i+j)%4 != 3 {
				o.Redis(ctx, &observe.Call{Script: s, Duration: d})
			}
		}
	}
}

// TestServeExportsTheSameMetrics holds 'idemkey serve”s stdlib exporter to
// this adapter: for the same events, the same text, byte for byte (names,
// help, types, labels, buckets, values).
func TestServeExportsTheSameMetrics(t *testing.T) {
	reg := prom.NewRegistry()
	obs, err := New(Options{Registerer: reg})
	require.NoError(t, err)
	x := metrics.NewExporter()

	var empty bytes.Buffer
	require.NoError(t, x.Write(&empty))
	require.NoError(t, testutil.GatherAndCompare(reg, &empty), "before any event")

	events(obs)
	events(x)
	var text bytes.Buffer
	require.NoError(t, x.Write(&text))
	require.NoError(t, testutil.GatherAndCompare(reg, bytes.NewReader(text.Bytes())))

	mfs, err := reg.Gather()
	require.NoError(t, err)
	var want bytes.Buffer
	for _, mf := range mfs {
		_, err := expfmt.MetricFamilyToText(&want, mf)
		require.NoError(t, err)
	}
	require.Equal(t, want.String(), text.String())
	for _, m := range spec.All {
		require.Contains(t, text.String(), "# HELP "+m.Name+" ")
		require.Contains(t, text.String(), "# TYPE "+m.Name+" "+string(m.Type)+"\n")
	}
}

func TestStoresShareARegistry(t *testing.T) {
	reg := prom.NewRegistry()
	a, err := New(Options{Registerer: reg})
	require.NoError(t, err)
	b, err := New(Options{Registerer: reg})
	require.NoError(t, err)
	for _, o := range []*Observer{a, b} {
		e := observe.NewEvent(observe.Completed, "", "k")
		e.Route = "POST /x"
		o.Event(context.Background(), &e)
	}
	require.Equal(t, map[string]float64{requests("POST /x", "executed"): 2, leases: -2}, snapshot(t, reg))
}

func TestRegistrationConflict(t *testing.T) {
	reg := prom.NewRegistry()
	reg.MustRegister(prom.NewGauge(prom.GaugeOpts{Name: "idemkey_fenced_total", Help: "something else"}))
	_, err := New(Options{Registerer: reg})
	require.Error(t, err)
	require.Contains(t, err.Error(), "idemkey prometheus")
	var are prom.AlreadyRegisteredError
	require.False(t, errors.As(err, &are), "a conflict, not a registration to share")
}

func TestDefaultRegistererAndRoute(t *testing.T) {
	old := prom.DefaultRegisterer
	reg := prom.NewRegistry()
	prom.DefaultRegisterer = reg
	t.Cleanup(func() { prom.DefaultRegisterer = old })

	o, err := New(Options{Route: func(r string) string {
		if strings.HasPrefix(r, "POST /v1/payments/") {
			return "POST /v1/payments/{id}"
		}
		return r
	}})
	require.NoError(t, err)
	for _, r := range []string{"POST /v1/payments/1", "POST /v1/payments/2", "POST /v1/orders"} {
		e := observe.NewEvent(observe.TookOver, "", "k")
		e.Route = r
		o.Event(context.Background(), &e)
	}
	o.Redis(context.Background(), &observe.Call{Script: "claim", Duration: time.Millisecond})
	got := snapshot(t, reg)
	require.Equal(t, map[string]float64{
		`idemkey_takeovers_total{route="POST /v1/payments/{id}"}`: 2,
		`idemkey_takeovers_total{route="POST /v1/orders"}`:        1,
		calls("claim"): 1,
		leases:         3,
	}, got)
	require.Equal(t, []string{"idemkey_leases_held", "idemkey_redis_seconds", "idemkey_takeovers_total"}, slices.Sorted(maps.Keys(families(t, reg))))
}

func families(t *testing.T, reg prom.Gatherer) map[string]bool {
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]bool{}
	for _, mf := range mfs {
		out[mf.GetName()] = true
	}
	return out
}

// BenchmarkEvent is the cost of one decision (a completed run) on a known
// route.
func BenchmarkEvent(b *testing.B) {
	o, err := New(Options{Registerer: prom.NewRegistry()})
	require.NoError(b, err)
	e := observe.NewEvent(observe.Completed, "s", "k")
	e.Route = "POST /v1/payments"
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		o.Event(ctx, &e)
	}
}

// BenchmarkRedis is the cost of one observed Redis call.
func BenchmarkRedis(b *testing.B) {
	o, err := New(Options{Registerer: prom.NewRegistry()})
	require.NoError(b, err)
	c := &observe.Call{Script: "claim", Duration: 300 * time.Microsecond}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		o.Redis(ctx, c)
	}
}
