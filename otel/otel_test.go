package otel

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkey/idemkey/internal/observetest"
	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/observe/metrics"
	"github.com/idemkey/idemkey/redisstore"
)

// providers are an in-memory tracer and meter provider.
type providers struct {
	spans  *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newProviders(t *testing.T) *providers {
	p := &providers{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	p.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(p.spans))
	p.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(p.reader))
	t.Cleanup(func() {
		_ = p.tp.Shutdown(context.Background())
		_ = p.mp.Shutdown(context.Background())
	})
	return p
}

// snapshot returns the metrics under their Prometheus series names, as
// observetest.Series names them: counters and the up-down counter by value,
// the histogram by count.
func (p *providers) snapshot(t *testing.T) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, p.reader.Collect(context.Background(), &rm))
	prom := map[string]string{}
	for _, m := range metrics.All {
		prom[m.OTel] = m.Name
	}
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			name, ok := prom[m.Name]
			require.True(t, ok, "unexpected instrument %q", m.Name)
			pairs := func(s attribute.Set) []string {
				var out []string
				for _, kv := range s.ToSlice() { // sorted by key
					out = append(out, string(kv.Key), kv.Value.AsString())
				}
				return out
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					out[observetest.Series(name, pairs(dp.Attributes)...)] = float64(dp.Value)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					require.Equal(t, metrics.RedisBuckets, dp.Bounds)
					out[observetest.Series(name+"_count", pairs(dp.Attributes)...)] = float64(dp.Count)
				}
			default:
				t.Fatalf("unexpected data %T of %s", m.Data, m.Name)
			}
		}
	}
	return out
}

// summary describes an idemkey span by its name and decision attributes:
// "idemkey.claim in_progress/in_progress #1 409 request-in-progress error".
func summary(s sdktrace.ReadOnlySpan) string {
	a := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		a[kv.Key] = kv.Value
	}
	parts := []string{s.Name()}
	if d, ok := a["idemkey.decision"]; ok {
		parts = append(parts, d.AsString()+"/"+a["idemkey.outcome"].AsString())
	}
	if v, ok := a["idemkey.attempt"]; ok {
		parts = append(parts, fmt.Sprintf("#%d", v.AsInt64()))
	}
	if v, ok := a["idemkey.status"]; ok {
		parts = append(parts, fmt.Sprint(v.AsInt64()))
	}
	if v, ok := a["idemkey.problem"]; ok {
		parts = append(parts, v.AsString())
	}
	if s.Status().Code == codes.Error {
		parts = append(parts, "error")
	}
	return strings.Join(parts, " ")
}

// TestSequence drives the scripted sequence behind a server span per request
// (as otelhttp makes) and asserts each step's idemkey spans with their
// decision attributes, and the metrics' deltas, which must be those the
// prometheus module sees.
func TestSequence(t *testing.T) {
	p := newProviders(t)
	obs, err := New(Options{TracerProvider: p.tp, MeterProvider: p.mp})
	require.NoError(t, err)
	server := p.tp.Tracer("test")

	want := map[string][]string{
		observetest.First:  {"idemkey.claim claimed/ #1", "idemkey.complete completed/executed #1 201"},
		observetest.Replay: {"idemkey.claim replayed/replayed 201"},
		// The duplicate is answered in-process: its decision has no Redis call.
		observetest.InProgress:     {"idemkey.claim claimed/ #1"},
		observetest.InProgressDone: {"idemkey.complete completed/executed #1 201"},
		observetest.Mismatch:       {"idemkey.claim mismatch/mismatch 422 key-reused"},
		observetest.Rejected:       nil, // no call to Redis: no span
		observetest.Takeover: {"idemkey.claim claimed/ #1", "idemkey.claim took_over/ #2",
			"idemkey.complete completed/executed #2 201"},
		observetest.Fenced: {"idemkey.complete fenced/executed #1 201"},
		// The status is the recorder's: 200, as the handler panicked
		// before writing anything.
		observetest.Panic:     {"idemkey.claim claimed/ #1", "idemkey.release released/released #1 200"},
		observetest.RedisDown: {"idemkey.claim unavailable/unavailable 503 store-unavailable error"},
	}
	routes := map[string]string{observetest.First: "POST /pay", observetest.Replay: "POST /pay",
		observetest.InProgress: "POST /slow", observetest.InProgressDone: "POST /slow", observetest.Mismatch: "POST /pay",
		observetest.Takeover: "POST /stall", observetest.Fenced: "POST /stall", observetest.Panic: "POST /panic",
		observetest.RedisDown: "POST /pay"}

	var (
		before map[string]float64
		seen   int
		mine   []sdktrace.ReadOnlySpan // every idemkey span but the heartbeats
	)
	idemkeySpans := func() []sdktrace.ReadOnlySpan {
		var out []sdktrace.ReadOnlySpan
		for _, s := range p.spans.GetSpans().Snapshots() {
			if strings.HasPrefix(s.Name(), "idemkey.") && s.Name() != "idemkey.extend" {
				out = append(out, s)
			}
		}
		return out
	}
	observetest.Run(t, observetest.Config{
		Observer: obs,
		Wrap: func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx, span := server.Start(r.Context(), "server "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer))
				defer span.End()
				next.ServeHTTP(w, r.WithContext(ctx))
			})
		},
		Before: func(string) { before = p.snapshot(t) },
		After: func(step string) {
			require.Equal(t, observetest.Want[step], observetest.Delta(before, p.snapshot(t)), "step %q: metrics", step)
			spans := idemkeySpans()
			got := []string{}
			for _, s := range spans[seen:] {
				got = append(got, summary(s))
				a := attribute.NewSet(s.Attributes()...)
				r, _ := a.Value("idemkey.route")
				require.Equal(t, routes[step], r.AsString(), "step %q: %s", step, s.Name())
				sys, _ := a.Value("db.system.name")
				require.Equal(t, "redis", sys.AsString())
				require.Equal(t, trace.SpanKindClient, s.SpanKind())
			}
			require.Equal(t, append([]string{}, want[step]...), got, "step %q: spans", step)
			mine = append(mine, spans[seen:]...)
			seen = len(spans)
		},
	})

	// Each idemkey span is a child of its request's server span, and lies
	// within it: made after the fact, with the call's own times. A server
	// span ends a moment after its client has the answer: wait for it.
	require.Eventually(t, func() bool {
		servers := map[trace.SpanID]sdktrace.ReadOnlySpan{}
		for _, s := range p.spans.GetSpans().Snapshots() {
			if strings.HasPrefix(s.Name(), "server ") {
				servers[s.SpanContext().SpanID()] = s
			}
		}
		for _, s := range mine {
			srv, ok := servers[s.Parent().SpanID()]
			if !ok {
				return false
			}
			require.Equal(t, srv.SpanContext().TraceID(), s.SpanContext().TraceID())
			require.False(t, s.StartTime().Before(srv.StartTime()), "%s starts before its request", s.Name())
			require.False(t, s.EndTime().After(srv.EndTime()), "%s ends after its request", s.Name())
			require.True(t, s.EndTime().After(s.StartTime()), "%s has its call's duration", s.Name())
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)

	// The failed call carries its error.
	last := mine[len(mine)-1]
	require.Len(t, last.Events(), 1)
	require.Equal(t, "exception", last.Events()[0].Name)
}

func newStore(t *testing.T, obs observe.Observer) (*redisstore.Store, *miniredis.Miniredis) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, redisstore.Options{Observer: obs})
	require.NoError(t, err)
	return store, mr
}

// Store.Do under a span: the claim and complete spans carry the Do's label as
// the route, and the key hash when a secret is set.
func TestDoUnderASpan(t *testing.T) {
	p := newProviders(t)
	obs, err := New(Options{TracerProvider: p.tp, MeterProvider: p.mp, KeyHashSecret: []byte("s3cret"),
		Route: func(r string) string { return "job " + r }})
	require.NoError(t, err)
	store, _ := newStore(t, obs)

	ctx, span := p.tp.Tracer("test").Start(context.Background(), "job")
	_, err = store.Do(ctx, redisstore.Request{Scope: "acct", Key: "k1", Label: "send-invoice"},
		func(context.Context, *redisstore.Lease) ([]byte, error) { return []byte("ok"), nil })
	require.NoError(t, err)
	span.End()

	e := observe.NewEvent(observe.Completed, "acct", "k1")
	hash := e.KeyHash([]byte("s3cret"))
	var got []string
	for _, s := range p.spans.GetSpans().Snapshots() {
		if s.Name() == "job" {
			continue
		}
		got = append(got, summary(s))
		a := attribute.NewSet(s.Attributes()...)
		v, _ := a.Value("idemkey.key_hash")
		require.Equal(t, hash, v.AsString())
		v, _ = a.Value("idemkey.route")
		require.Equal(t, "job send-invoice", v.AsString())
		require.Equal(t, span.SpanContext().SpanID(), s.Parent().SpanID())
	}
	require.Equal(t, []string{"idemkey.claim claimed/ #1", "idemkey.complete completed/executed #1"}, got)
	require.Equal(t, map[string]float64{
		observetest.Series("idemkey_requests_total", "outcome", "executed", "route", "job send-invoice"): 1,
		observetest.Series("idemkey_redis_seconds_count", "script", "claim"):                             1,
		observetest.Series("idemkey_redis_seconds_count", "script", "complete"):                          1,
		observetest.Leases: 0,
	}, p.snapshot(t))
}

// Without a parent span, the calls' spans end at once, without the
// decision; heartbeats get none.
func TestWithoutAParentSpan(t *testing.T) {
	p := newProviders(t)
	obs, err := New(Options{TracerProvider: p.tp, MeterProvider: p.mp})
	require.NoError(t, err)
	store, _ := newStore(t, obs)
	_, err = store.Do(context.Background(), redisstore.Request{Key: "k1"},
		func(context.Context, *redisstore.Lease) ([]byte, error) { return nil, nil })
	require.NoError(t, err)
	obs.Redis(context.Background(), &observe.Call{Script: "extend", Start: time.Now(), Duration: time.Millisecond})

	var got []string
	for _, s := range p.spans.GetSpans().Snapshots() {
		got = append(got, summary(s))
		require.False(t, s.Parent().IsValid())
	}
	require.Equal(t, []string{"idemkey.claim", "idemkey.complete"}, got)
	require.Equal(t, float64(1), p.snapshot(t)[observetest.Series("idemkey_redis_seconds_count", "script", "extend")])
}

// Calls no decision follows (Store.Claim used directly) end their spans
// when they have waited long enough, at the next call under another span.
func TestCallsWithoutADecision(t *testing.T) {
	p := newProviders(t)
	obs, err := New(Options{TracerProvider: p.tp, MeterProvider: p.mp})
	require.NoError(t, err)
	obs.maxWait = 0
	store, _ := newStore(t, obs)
	tracer := p.tp.Tracer("test")

	ctx, span := tracer.Start(context.Background(), "one")
	c, err := store.Claim(ctx, redisstore.Request{Key: "k1"})
	require.NoError(t, err)
	span.End()
	require.Len(t, p.spans.GetSpans(), 1, "the claim waits for its decision")

	ctx, span = tracer.Start(context.Background(), "two")
	require.NoError(t, c.Lease.Complete(ctx, redisstore.Response{Code: 1}))
	span.End()
	var got []string
	for _, s := range p.spans.GetSpans().Snapshots() {
		got = append(got, summary(s))
		if s.Name() == "idemkey.claim" {
			require.Equal(t, "one", p.spans.GetSpans().Snapshots()[0].Name())
			require.Equal(t, p.spans.GetSpans().Snapshots()[0].SpanContext().SpanID(), s.Parent().SpanID())
		}
	}
	require.ElementsMatch(t, []string{"one", "two", "idemkey.claim"}, got, "the complete waits, the claim waited enough")
	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Len(t, obs.pending, 1)
}

// The pending calls stay bounded when decisions never come.
func TestPendingIsBounded(t *testing.T) {
	p := newProviders(t)
	obs, err := New(Options{TracerProvider: p.tp, MeterProvider: p.mp})
	require.NoError(t, err)
	tracer := p.tp.Tracer("test")
	for range maxPending + 10 {
		ctx, span := tracer.Start(context.Background(), "op")
		obs.Redis(ctx, &observe.Call{Script: "claim", Start: time.Now(), Duration: time.Microsecond})
		span.End()
	}
	obs.mu.Lock()
	n := len(obs.pending)
	obs.mu.Unlock()
	require.LessOrEqual(t, n, maxPending)
}

// The defaults are the global providers.
func TestGlobalProviders(t *testing.T) {
	p := newProviders(t)
	oldTP, oldMP := gotel.GetTracerProvider(), gotel.GetMeterProvider()
	gotel.SetTracerProvider(p.tp)
	gotel.SetMeterProvider(p.mp)
	t.Cleanup(func() {
		gotel.SetTracerProvider(oldTP)
		gotel.SetMeterProvider(oldMP)
	})
	obs, err := New(Options{})
	require.NoError(t, err)
	ctx, span := p.tp.Tracer("test").Start(context.Background(), "req")
	obs.Redis(ctx, &observe.Call{Script: "claim", Start: time.Now(), Duration: time.Millisecond, Err: errors.New("boom")})
	e := observe.NewEvent(observe.Unavailable, "", "k")
	e.Route = "POST /x"
	obs.Event(ctx, &e)
	span.End()
	var got []string
	for _, s := range p.spans.GetSpans().Snapshots() {
		got = append(got, summary(s))
	}
	require.Equal(t, []string{"idemkey.claim unavailable/unavailable error", "req"}, got)
	require.Equal(t, float64(1), p.snapshot(t)[observetest.Series("idemkey_requests_total", "outcome", "unavailable", "route", "POST /x")])
}

// The observer is safe for concurrent use.
func TestConcurrent(t *testing.T) {
	p := newProviders(t)
	obs, err := New(Options{TracerProvider: p.tp, MeterProvider: p.mp})
	require.NoError(t, err)
	tracer := p.tp.Tracer("test")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				ctx, span := tracer.Start(context.Background(), "req")
				obs.Redis(ctx, &observe.Call{Script: "claim", Start: time.Now(), Duration: time.Microsecond})
				e := observe.NewEvent(observe.Claimed, "", "k")
				e.Route, e.Attempt = fmt.Sprintf("POST /%d", (g+i)%3), 1
				obs.Event(ctx, &e)
				obs.Redis(ctx, &observe.Call{Script: "complete", Start: time.Now(), Duration: time.Microsecond})
				e.Kind = observe.Completed
				obs.Event(ctx, &e)
				span.End()
			}
		})
	}
	wg.Wait()
	snap := p.snapshot(t)
	require.Equal(t, float64(0), snap[observetest.Leases])
	require.Equal(t, float64(800), snap[observetest.Series("idemkey_redis_seconds_count", "script", "claim")])
	n := 0
	for _, s := range p.spans.GetSpans().Snapshots() {
		if strings.HasPrefix(s.Name(), "idemkey.") {
			n++
			require.Contains(t, summary(s), "#", "every call got its decision")
		}
	}
	require.Equal(t, 1600, n)
}
