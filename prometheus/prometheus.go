// Package prometheus exports idemkey's decisions and Redis calls as
// Prometheus metrics: set an Observer from New as the store's
// redisstore.Options.Observer, and every store, Store.Do and middleware
// (ginmw, httpmw) on that store counts in it.
//
//	obs, err := prometheus.New(prometheus.Options{})
//	store, err := redisstore.New(rdb, redisstore.Options{Observer: obs})
//
// The metrics (their names are public and never change):
//
//	idemkey_requests_total{route, outcome}  counter: requests with a key (and Store.Do calls) by how they ended
//	idemkey_takeovers_total{route}          counter: runs that took over a key an earlier attempt left without an outcome
//	idemkey_fenced_total{route}             counter: runs whose outcome was not stored because another attempt took their key over
//	idemkey_redis_seconds{script}           histogram: duration of each Redis call, by script (claim, complete, release, ...)
//	idemkey_leases_held                     gauge: the leases this process holds now (runs in progress)
//
// The outcome label is one of executed (the handler ran to an end:
// completed, fenced, or not stored because Redis failed), replayed,
// in_progress (409), mismatch (422), released (the handler ran and gave
// its key back: 5xx, panic), unavailable (Redis failed: 503), rejected
// (refused before any claim: no key, bad key, body too large), expired
// (only the outcome's tombstone was left) and fail_open (ran unprotected
// with Redis down). The route label is the method and the route's pattern
// ("POST /v1/payments/{id}", Gin's FullPath), "POST unmatched" where the
// middleware saw no pattern (never the path), or Store.Do's Request.Label.
// It is bounded whatever it is sent: valid UTF-8, at most 256 bytes, and at
// most Options.MaxRoutes distinct values (then "other"). 'idemkey serve'
// exposes the same metrics, with the same names, types, labels and help,
// from the standard library alone; their description is package
// github.com/idemkey/idemkey/observe/metrics, for exporters of your own.
//
// # Why a module of its own
//
// This package lives in its own Go module (github.com/idemkey/idemkey/prometheus)
// so that client_golang and its dependencies reach only the programs that
// import it: the core module's go.mod has no metrics or tracing dependency.
// Its name is that of client_golang's package, so import it under another
// name where both are used (idemprom, say).
package prometheus

import (
	"context"
	"errors"
	"fmt"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/observe/metrics"
)

// Options configures New. The zero value gives the defaults.
type Options struct {
	// Registerer is where the metrics are registered. A metric already
	// registered there by another Observer (of another store) is shared, so
	// several stores may count into one registry. Default:
	// prometheus.DefaultRegisterer.
	Registerer prom.Registerer

	// Route maps an event's route to the route label, for instance to
	// rename routes or fold several into one: every distinct label value is
	// a series kept for ever. It must be safe for concurrent use. What it
	// returns is bounded as the route is (see MaxRoutes). Default: the route
	// as it is.
	Route func(route string) string

	// MaxRoutes is how many distinct route label values the metrics keep:
	// once as many have been seen, every new route counts as "other"
	// (metrics.OtherRoute), so that no input grows the registry without
	// bound. Default: 512 (metrics.DefaultMaxRoutes).
	MaxRoutes int

	// Buckets are the upper bounds, in seconds, of idemkey_redis_seconds's
	// buckets. Default: 100µs to 2.5s, 14 buckets (the buckets 'idemkey
	// serve' uses).
	Buckets []float64
}

// Observer counts idemkey's decisions and Redis calls into Prometheus
// metrics. It is safe for concurrent use.
type Observer struct {
	route     func(string) string
	routes    *metrics.Routes
	requests  *prom.CounterVec
	takeovers *prom.CounterVec
	fenced    *prom.CounterVec
	redis     *prom.HistogramVec
	leases    prom.Gauge
}

var _ observe.Observer = (*Observer)(nil)

// New returns an Observer whose metrics are registered with
// opts.Registerer. It fails if a metric of the same name but another kind,
// help or labels is registered there already, or if opts.MaxRoutes is
// negative.
func New(opts Options) (*Observer, error) {
	if opts.MaxRoutes < 0 {
		return nil, fmt.Errorf("idemkey prometheus: negative MaxRoutes %d", opts.MaxRoutes)
	}
	if opts.Registerer == nil {
		opts.Registerer = prom.DefaultRegisterer
	}
	if opts.Buckets == nil {
		opts.Buckets = metrics.RedisBuckets
	}
	o := &Observer{
		route:     opts.Route,
		routes:    metrics.NewRoutes(opts.MaxRoutes),
		requests:  prom.NewCounterVec(counterOpts(&metrics.Requests), metrics.Requests.Labels),
		takeovers: prom.NewCounterVec(counterOpts(&metrics.Takeovers), metrics.Takeovers.Labels),
		fenced:    prom.NewCounterVec(counterOpts(&metrics.Fenced), metrics.Fenced.Labels),
		redis: prom.NewHistogramVec(prom.HistogramOpts{Name: metrics.RedisSeconds.Name, Help: metrics.RedisSeconds.Help,
			Buckets: opts.Buckets}, metrics.RedisSeconds.Labels),
		leases: prom.NewGauge(prom.GaugeOpts{Name: metrics.LeasesHeld.Name, Help: metrics.LeasesHeld.Help}),
	}
	var err error
	if o.requests, err = register(opts.Registerer, o.requests); err != nil {
		return nil, err
	}
	if o.takeovers, err = register(opts.Registerer, o.takeovers); err != nil {
		return nil, err
	}
	if o.fenced, err = register(opts.Registerer, o.fenced); err != nil {
		return nil, err
	}
	if o.redis, err = register(opts.Registerer, o.redis); err != nil {
		return nil, err
	}
	if o.leases, err = register(opts.Registerer, o.leases); err != nil {
		return nil, err
	}
	return o, nil
}

func counterOpts(m *metrics.Metric) prom.CounterOpts {
	return prom.CounterOpts{Name: m.Name, Help: m.Help}
}

// register registers c, or returns the collector registered before it
// under the same description.
func register[C prom.Collector](r prom.Registerer, c C) (C, error) {
	err := r.Register(c)
	var are prom.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	if err != nil {
		return c, fmt.Errorf("idemkey prometheus: %w", err)
	}
	return c, nil
}

// Event counts e: idemkey_requests_total for the decisions that end a
// request, idemkey_takeovers_total and idemkey_fenced_total, and
// idemkey_leases_held up when a run starts and down when it ends.
func (o *Observer) Event(_ context.Context, e *observe.Event) {
	if out := metrics.Outcome(e.Kind); out != "" || e.Kind == observe.TookOver {
		route := e.Route
		if o.route != nil {
			route = o.route(route)
		}
		route = o.routes.Label(route)
		if out != "" {
			o.requests.WithLabelValues(route, out).Inc()
		}
		switch e.Kind {
		case observe.TookOver:
			o.takeovers.WithLabelValues(route).Inc()
		case observe.Fenced:
			o.fenced.WithLabelValues(route).Inc()
		}
	}
	if d := metrics.LeaseDelta(e.Kind); d != 0 {
		o.leases.Add(float64(d))
	}
}

// Redis observes the call's duration in idemkey_redis_seconds.
func (o *Observer) Redis(_ context.Context, c *observe.Call) {
	o.redis.WithLabelValues(c.Script).Observe(c.Duration.Seconds())
}
