// Package otel reports idemkey's decisions and Redis calls to
// OpenTelemetry: a span for each Redis call (claim, complete, release, ...)
// carrying the decision it led to, and the metrics of the prometheus module
// through otel/metric. Set an Observer from New as the store's
// redisstore.Options.Observer; every store, Store.Do and middleware (ginmw,
// httpmw) on that store reports to it.
//
//	obs, err := otel.New(otel.Options{}) // the global providers
//	store, err := redisstore.New(rdb, redisstore.Options{Observer: obs})
//
// # Spans
//
// Each Redis call becomes a client span named "idemkey.<script>"
// ("idemkey.claim", "idemkey.complete", ...), a child of the span in the
// call's context (the server span of otelhttp or otelgin, say), made after
// the fact with the call's start and end times. The call that decided a
// request also carries:
//
//	idemkey.decision   claimed, took_over, completed, released, fenced, not_stored, replayed,
//	                   in_progress, mismatch, expired, unavailable, fail_open, rejected
//	idemkey.outcome    the outcome label of idemkey_requests_total, for decisions that end a request
//	idemkey.route      the route (method and pattern)
//	idemkey.attempt    the attempt, when known
//	idemkey.status     the stored or replayed status, when there is one
//	idemkey.problem    the problem type answered, when there is one
//	idemkey.key_hash   a keyed hash of the scope and key, with Options.KeyHashSecret
//
// The observer learns a call's decision only after the call, from the event
// that follows it in the same request, which it finds by the parent span: so
// the spans of claim, complete and release wait for their decision before
// they end. Calls that no decision follows (Store.Claim and Lease methods
// used directly) end without one, at the first call under another span
// once they have waited a second. Without a parent span (no tracing
// upstream) the spans of claim, complete and release end at once, without
// the decision, and the heartbeats (extend), which run outside any
// request, get no span; the histogram counts every call. Calls made under
// one parent span by concurrent goroutines (Store.Do run in parallel from one
// handler) may see each other's decisions.
//
// # Metrics
//
// The counters and histogram of the prometheus module, under OpenTelemetry
// names that the OpenTelemetry Prometheus exporter turns back into the same
// Prometheus names:
//
//	idemkey.requests       counter {request}  route, outcome    (idemkey_requests_total)
//	idemkey.takeovers      counter {takeover} route             (idemkey_takeovers_total)
//	idemkey.fenced         counter {run}      route             (idemkey_fenced_total)
//	idemkey.redis          histogram s        script            (idemkey_redis_seconds)
//	idemkey.leases.held    up-down counter {lease}              (idemkey_leases_held)
//
// # Why a module of its own
//
// This package lives in its own Go module (github.com/idemkey/idemkey/otel)
// so that OpenTelemetry reaches only the programs that import it: the core
// module's go.mod has no metrics or tracing dependency. Its name is that of
// OpenTelemetry's root package, so import it under another name where both
// are used (idemotel, say).
package otel

import (
	"context"
	"fmt"
	"sync"
	"time"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/observe/metrics"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/idemkey/idemkey/otel"

// Options configures New. The zero value gives the defaults.
type Options struct {
	// TracerProvider makes the spans. Default: the global provider
	// (otel.GetTracerProvider), as it is when the spans are made.
	TracerProvider trace.TracerProvider

	// MeterProvider makes the instruments. Default: the global provider
	// (otel.GetMeterProvider).
	MeterProvider metric.MeterProvider

	// Route maps an event's route to the route attribute of the metrics
	// (every distinct value is a series kept for ever) and the spans. It
	// must be safe for concurrent use. What it returns is bounded as the
	// route is (see MaxRoutes). Default: the route as it is.
	Route func(route string) string

	// MaxRoutes is how many distinct route values the metrics and spans
	// carry: once as many have been seen, every new route is "other"
	// (metrics.OtherRoute), so that no input grows the series (or this
	// observer's memory) without bound. Every value is valid UTF-8 and at
	// most 256 bytes. Default: 512 (metrics.DefaultMaxRoutes).
	MaxRoutes int

	// KeyHashSecret, if set, adds idemkey.key_hash (observe.Event.KeyHash
	// with this secret) to the spans, so that operators can find a key's
	// spans across processes without the key. Default: nil (no hash).
	KeyHashSecret []byte
}

// Observer turns idemkey's decisions and Redis calls into spans and
// metrics. It is safe for concurrent use.
type Observer struct {
	tracer trace.Tracer
	route  func(string) string
	routes *metrics.Routes
	secret []byte

	requests, takeovers, fenced metric.Int64Counter
	leases                      metric.Int64UpDownCounter
	redis                       metric.Float64Histogram
	attrs                       sync.Map // [2]string{name, value...} → metric.MeasurementOption

	mu        sync.Mutex
	pending   map[parent]*calls
	lastSweep time.Time
	maxWait   time.Duration // how long a call waits for its decision
}

// parent identifies the span a call was made under.
type parent struct {
	trace trace.TraceID
	span  trace.SpanID
}

// calls are the calls made under one parent span since its last decision.
type calls struct {
	sc    trace.SpanContext
	first time.Time
	list  []observe.Call
}

// maxPending bounds the parents waiting for a decision; past it, waits are
// cut short (their spans end without a decision) until it holds again.
const maxPending = 4096

var _ observe.Observer = (*Observer)(nil)

// New returns an Observer. It fails if the meter provider refuses an
// instrument, or if opts.MaxRoutes is negative.
func New(opts Options) (*Observer, error) {
	if opts.MaxRoutes < 0 {
		return nil, fmt.Errorf("idemkey otel: negative MaxRoutes %d", opts.MaxRoutes)
	}
	tp, mp := opts.TracerProvider, opts.MeterProvider
	if tp == nil {
		tp = gotel.GetTracerProvider()
	}
	if mp == nil {
		mp = gotel.GetMeterProvider()
	}
	o := &Observer{tracer: tp.Tracer(ScopeName), route: opts.Route, routes: metrics.NewRoutes(opts.MaxRoutes), secret: opts.KeyHashSecret,
		pending: map[parent]*calls{}, maxWait: time.Second}
	m := mp.Meter(ScopeName)
	var err error
	counter := func(d *metrics.Metric) metric.Int64Counter {
		c, e := m.Int64Counter(d.OTel, metric.WithDescription(d.Help), metric.WithUnit(d.Unit))
		if e != nil && err == nil {
			err = fmt.Errorf("idemkey otel: %s: %w", d.OTel, e)
		}
		return c
	}
	o.requests, o.takeovers, o.fenced = counter(&metrics.Requests), counter(&metrics.Takeovers), counter(&metrics.Fenced)
	var e error
	if o.leases, e = m.Int64UpDownCounter(metrics.LeasesHeld.OTel, metric.WithDescription(metrics.LeasesHeld.Help),
		metric.WithUnit(metrics.LeasesHeld.Unit)); e != nil && err == nil {
		err = fmt.Errorf("idemkey otel: %s: %w", metrics.LeasesHeld.OTel, e)
	}
	if o.redis, e = m.Float64Histogram(metrics.RedisSeconds.OTel, metric.WithDescription(metrics.RedisSeconds.Help),
		metric.WithUnit(metrics.RedisSeconds.Unit), metric.WithExplicitBucketBoundaries(metrics.RedisBuckets...)); e != nil && err == nil {
		err = fmt.Errorf("idemkey otel: %s: %w", metrics.RedisSeconds.OTel, e)
	}
	if err != nil {
		return nil, err
	}
	return o, nil
}

// attrSet returns the measurement option of the attribute set
// {names[0]: values[0], names[1]: values[1]}, cached.
func (o *Observer) attrSet(names []string, a, b string) metric.MeasurementOption {
	k := [3]string{names[0], a, b}
	if v, ok := o.attrs.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	kv := []attribute.KeyValue{attribute.String(names[0], a)}
	if len(names) > 1 {
		kv = append(kv, attribute.String(names[1], b))
	}
	v, _ := o.attrs.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kv...)))
	return v.(metric.MeasurementOption)
}

// Event counts e and ends the spans of the calls that led to it, with the
// decision.
func (o *Observer) Event(ctx context.Context, e *observe.Event) {
	route := e.Route
	if o.route != nil {
		route = o.route(route)
	}
	route = o.routes.Label(route)
	outcome := metrics.Outcome(e.Kind)
	if outcome != "" {
		o.requests.Add(ctx, 1, o.attrSet(metrics.Requests.Labels, route, outcome))
	}
	switch e.Kind {
	case observe.TookOver:
		o.takeovers.Add(ctx, 1, o.attrSet(metrics.Takeovers.Labels, route, ""))
	case observe.Fenced:
		o.fenced.Add(ctx, 1, o.attrSet(metrics.Fenced.Labels, route, ""))
	}
	if d := metrics.LeaseDelta(e.Kind); d != 0 {
		o.leases.Add(ctx, int64(d))
	}

	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	o.mu.Lock()
	p := o.pending[parent{sc.TraceID(), sc.SpanID()}]
	delete(o.pending, parent{sc.TraceID(), sc.SpanID()})
	o.mu.Unlock()
	if p == nil {
		return
	}
	attrs := []attribute.KeyValue{attribute.String("idemkey.decision", metrics.Decision(e.Kind)),
		attribute.String("idemkey.route", route)}
	if outcome != "" {
		attrs = append(attrs, attribute.String("idemkey.outcome", outcome))
	}
	if e.Attempt > 0 {
		attrs = append(attrs, attribute.Int("idemkey.attempt", e.Attempt))
	}
	if e.Status != 0 {
		attrs = append(attrs, attribute.Int("idemkey.status", e.Status))
	}
	if e.Problem != "" {
		attrs = append(attrs, attribute.String("idemkey.problem", e.Problem))
	}
	if o.secret != nil {
		if h := e.KeyHash(o.secret); h != "" {
			attrs = append(attrs, attribute.String("idemkey.key_hash", h))
		}
	}
	for i := range p.list {
		if i == len(p.list)-1 { // the call that decided
			o.span(ctx, &p.list[i], attrs...)
		} else {
			o.span(ctx, &p.list[i], attrs[1]) // the route only
		}
	}
}

// decides reports whether a script's call is followed by the decision it led
// to.
func decides(script string) bool {
	switch script {
	case "claim", "legacy", "complete", "release":
		return true
	}
	return false
}

// Redis records the call's duration and makes its span: at once, or once
// the decision it leads to is known.
func (o *Observer) Redis(ctx context.Context, c *observe.Call) {
	o.redis.Record(ctx, c.Duration.Seconds(), o.attrSet(metrics.RedisSeconds.Labels, c.Script, ""))
	sc := trace.SpanContextFromContext(ctx)
	switch {
	case !sc.IsValid() && !decides(c.Script):
		return // a heartbeat (extend): it runs outside any request's trace
	case !sc.IsValid() || !decides(c.Script):
		o.span(ctx, c)
		return
	}
	now := time.Now()
	var stale []*calls
	o.mu.Lock()
	k := parent{sc.TraceID(), sc.SpanID()}
	p := o.pending[k]
	if p == nil {
		p = &calls{sc: sc, first: now}
		o.pending[k] = p
	}
	p.list = append(p.list, *c)
	if now.Sub(o.lastSweep) >= o.maxWait || len(o.pending) > maxPending {
		o.lastSweep = now
		for pk, p := range o.pending {
			if pk != k && (now.Sub(p.first) >= o.maxWait || len(o.pending) > maxPending) {
				stale = append(stale, p)
				delete(o.pending, pk)
			}
		}
	}
	o.mu.Unlock()
	// Calls that waited too long for a decision (Store.Claim used directly,
	// say) get their spans without one.
	for _, p := range stale {
		pctx := trace.ContextWithSpanContext(context.Background(), p.sc)
		for i := range p.list {
			o.span(pctx, &p.list[i])
		}
	}
}

// span makes the span of call c under ctx's span, after the fact.
func (o *Observer) span(ctx context.Context, c *observe.Call, attrs ...attribute.KeyValue) {
	_, s := o.tracer.Start(ctx, "idemkey."+c.Script, trace.WithTimestamp(c.Start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", "redis"), attribute.String("idemkey.script", c.Script)))
	if !s.IsRecording() {
		s.End()
		return
	}
	s.SetAttributes(attrs...)
	if c.Err != nil {
		s.RecordError(c.Err, trace.WithTimestamp(c.Start.Add(c.Duration)))
		s.SetStatus(codes.Error, c.Err.Error())
	}
	s.End(trace.WithTimestamp(c.Start.Add(c.Duration)))
}
