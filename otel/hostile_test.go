package otel

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemkey/idemkey/internal/observetest"
	"github.com/idemkey/idemkey/observe"
)

// Regression: the route attribute was the raw path where no
// pattern matched: not valid UTF-8 for POST /%FF (which the OpenTelemetry
// Prometheus exporter, like client_golang, refuses), and a series (and a
// cached attribute set) per distinct path. Now every request gets its
// answer, and the route takes a bounded set of valid values, in the metrics
// and the spans alike.
func TestHostilePaths(t *testing.T) {
	p := newProviders(t)
	obs, err := New(Options{TracerProvider: p.tp, MeterProvider: p.mp})
	require.NoError(t, err)
	server := p.tp.Tracer("test")
	observetest.Hostile(t, observetest.Config{Observer: obs,
		Wrap: func(next http.Handler) http.Handler { // a server span per request, as otelhttp makes
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx, span := server.Start(r.Context(), "request")
				defer span.End()
				next.ServeHTTP(w, r.WithContext(ctx))
			})
		},
		Do: func(ctx context.Context) (context.Context, func()) {
			ctx, span := server.Start(ctx, "job")
			return ctx, func() { span.End() }
		},
	})

	var rm metricdata.ResourceMetrics
	require.NoError(t, p.reader.Collect(context.Background(), &rm))
	routes := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range d.DataPoints {
					for _, kv := range dp.Attributes.ToSlice() {
						require.True(t, utf8.ValidString(kv.Value.AsString()), "%s: %s=%q", m.Name, kv.Key, kv.Value.AsString())
						if kv.Key == "route" {
							routes[kv.Value.AsString()] = true
						}
					}
				}
			}
		}
	}
	do := strings.ToValidUTF8(observetest.BadLabel, "\uFFFD")
	require.Equal(t, map[string]bool{observetest.UnmatchedRoute: true, observetest.ItemsRoute: true, do: true}, routes)

	spanRoutes := map[string]bool{}
	for _, s := range p.spans.GetSpans().Snapshots() {
		for _, kv := range s.Attributes() {
			if kv.Key == "idemkey.route" {
				require.True(t, utf8.ValidString(kv.Value.AsString()), "%s: %q", s.Name(), kv.Value.AsString())
				spanRoutes[kv.Value.AsString()] = true
			}
		}
	}
	require.Equal(t, routes, spanRoutes)

	snap := p.snapshot(t)
	unmatched := observetest.UnmatchedRoute
	for series, want := range map[string]float64{
		observetest.Series("idemkey_requests_total", "outcome", "executed", "route", unmatched): 3 + observetest.HostilePaths,
		observetest.Series("idemkey_requests_total", "outcome", "replayed", "route", unmatched): 3,
		observetest.Series("idemkey_takeovers_total", "route", unmatched):                       1,
		observetest.Series("idemkey_requests_total", "outcome", "executed", "route", do):        2,
		observetest.Leases: 0,
	} {
		require.Equal(t, want, snap[series], series)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Empty(t, obs.pending, "every call got its decision")
}

// Past MaxRoutes distinct routes, every new one is "other", in the metrics
// and the spans.
func TestMaxRoutes(t *testing.T) {
	_, err := New(Options{MaxRoutes: -1})
	require.ErrorContains(t, err, "MaxRoutes")

	p := newProviders(t)
	obs, err := New(Options{TracerProvider: p.tp, MeterProvider: p.mp, MaxRoutes: 2})
	require.NoError(t, err)
	tracer := p.tp.Tracer("test")
	for _, r := range []string{"POST /a", "POST /b", "POST /c", "POST /\xff"} {
		ctx, span := tracer.Start(context.Background(), "req")
		obs.Redis(ctx, &observe.Call{Script: "complete", Start: time.Now(), Duration: time.Microsecond})
		e := observe.NewEvent(observe.Completed, "", "k")
		e.Route = r
		obs.Event(ctx, &e)
		span.End()
	}
	snap := p.snapshot(t)
	for _, r := range []string{"POST /a", "POST /b"} {
		require.Equal(t, float64(1), snap[observetest.Series("idemkey_requests_total", "outcome", "executed", "route", r)], r)
	}
	require.Equal(t, float64(2), snap[observetest.Series("idemkey_requests_total", "outcome", "executed", "route", "other")])
	var got []string
	for _, s := range p.spans.GetSpans().Snapshots() {
		set := attribute.NewSet(s.Attributes()...)
		if v, ok := set.Value("idemkey.route"); ok {
			got = append(got, v.AsString())
		}
	}
	require.Equal(t, []string{"POST /a", "POST /b", "other", "other"}, got)
}
