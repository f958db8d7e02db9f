// Package metrics is the one source of idemkey's metric names, help texts,
// types, labels and buckets, of how an observe.Event counts in them, and of
// the bound on the route label. The prometheus and otel modules of this
// repository build their instruments from it, and so does the exporter
// 'idemkey serve' serves on /metrics; an exporter for another metrics
// library can too. It uses the standard library only.
//
// The names, types and labels are a public contract: they never change.
package metrics

import (
	"sync"
	"sync/atomic"

	"github.com/idemkey/idemkey/observe"
)

// Type is a metric's type, as the Prometheus text format names it.
type Type string

// The metric types.
const (
	Counter   Type = "counter"
	Gauge     Type = "gauge"
	Histogram Type = "histogram"
)

// Metric describes one metric.
type Metric struct {
	// Name is the Prometheus name, a public contract.
	Name string
	// Help is the help text.
	Help string
	// Type is the Prometheus type.
	Type Type
	// Labels are the label names, in the order the adapters pass values.
	Labels []string
	// OTel is the OpenTelemetry instrument name: with Unit, the OTel
	// Prometheus exporter translates it to Name.
	OTel string
	// Unit is the OpenTelemetry unit.
	Unit string
}

// The metrics. Their names are public: never rename one.
var (
	Requests = Metric{
		Name: "idemkey_requests_total",
		Help: "Requests with an idempotency key (and Store.Do calls) by route and outcome: executed (the handler ran to an end: " +
			"stored, fenced or not stored), replayed, in_progress (409), mismatch (422), released (ran, key given back for a retry), " +
			"unavailable (Redis failed: 503), rejected (refused before any claim), expired (only a tombstone left), " +
			"fail_open (ran unprotected, Redis down).",
		Type: Counter, Labels: []string{"route", "outcome"}, OTel: "idemkey.requests", Unit: "{request}",
	}
	Takeovers = Metric{
		Name: "idemkey_takeovers_total",
		Help: "Runs that took over a key whose earlier attempt ended without an outcome (crashed, stalled, or released after partial work), by route.",
		Type: Counter, Labels: []string{"route"}, OTel: "idemkey.takeovers", Unit: "{takeover}",
	}
	Fenced = Metric{
		Name: "idemkey_fenced_total",
		Help: "Runs whose outcome was not stored because another attempt took their key over while they ran (lease lost), by route.",
		Type: Counter, Labels: []string{"route"}, OTel: "idemkey.fenced", Unit: "{run}",
	}
	RedisSeconds = Metric{
		Name: "idemkey_redis_seconds",
		Help: "Duration of idemkey's calls to Redis (one script run, with its WAIT when replicas are awaited), failed calls included, by script.",
		Type: Histogram, Labels: []string{"script"}, OTel: "idemkey.redis", Unit: "s",
	}
	LeasesHeld = Metric{
		Name: "idemkey_leases_held",
		Help: "Leases this process holds now: runs in progress.",
		Type: Gauge, OTel: "idemkey.leases.held", Unit: "{lease}",
	}
)

// All lists the metrics in name order, the order the text format shows them.
var All = []*Metric{&Fenced, &LeasesHeld, &RedisSeconds, &Requests, &Takeovers}

// RedisBuckets are the upper bounds of idemkey_redis_seconds's buckets, in
// seconds: a script on a nearby Redis takes 0.1 to 1 ms, a WAIT for replicas
// or a loaded server more.
var RedisBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// The outcome label's values. The first seven are named by the issue that
// made the metric public; never rename one.
const (
	OutcomeExecuted    = "executed"
	OutcomeReplayed    = "replayed"
	OutcomeInProgress  = "in_progress"
	OutcomeMismatch    = "mismatch"
	OutcomeReleased    = "released"
	OutcomeUnavailable = "unavailable"
	OutcomeRejected    = "rejected"
	OutcomeExpired     = "expired"
	OutcomeFailOpen    = "fail_open"
)

// Outcome returns the outcome label of an event that ends a request, and ""
// for one that does not (Claimed, TookOver).
func Outcome(k observe.Kind) string {
	switch k {
	case observe.Completed, observe.Fenced, observe.NotStored:
		return OutcomeExecuted
	case observe.Released:
		return OutcomeReleased
	case observe.Replayed:
		return OutcomeReplayed
	case observe.InProgress:
		return OutcomeInProgress
	case observe.Mismatch:
		return OutcomeMismatch
	case observe.Expired:
		return OutcomeExpired
	case observe.Unavailable:
		return OutcomeUnavailable
	case observe.FailOpen:
		return OutcomeFailOpen
	case observe.Rejected:
		return OutcomeRejected
	}
	return ""
}

// LeaseDelta is how an event changes the leases this process holds: +1 when
// a run starts (Claimed, TookOver), -1 when it ends (Completed, Released,
// Fenced, NotStored), else 0.
func LeaseDelta(k observe.Kind) int {
	switch k {
	case observe.Claimed, observe.TookOver:
		return 1
	case observe.Completed, observe.Released, observe.Fenced, observe.NotStored:
		return -1
	}
	return 0
}

var decisions = [...]string{observe.Claimed: "claimed", observe.TookOver: "took_over", observe.Completed: "completed",
	observe.Released: "released", observe.Fenced: "fenced", observe.NotStored: "not_stored", observe.Replayed: "replayed",
	observe.InProgress: "in_progress", observe.Mismatch: "mismatch", observe.Expired: "expired",
	observe.Unavailable: "unavailable", observe.FailOpen: "fail_open", observe.Rejected: "rejected",
	observe.Forgotten: "forgotten"}

// Decision names an event's kind as an attribute value: "claimed",
// "took_over", "completed", "not_stored" and so on; "unknown" for a kind it
// does not know.
func Decision(k observe.Kind) string {
	if int(k) < len(decisions) && decisions[k] != "" {
		return decisions[k]
	}
	return "unknown"
}

// DefaultMaxRoutes is how many distinct route label values an exporter
// keeps by default (see Routes).
const DefaultMaxRoutes = 512

// OtherRoute is the route label of the routes past an exporter's limit.
const OtherRoute = "other"

// Routes bounds the values of one exporter's route label: each is valid
// UTF-8 and at most observe.MaxLabelLen bytes (observe.Label), and once max
// distinct values have been seen, every new one counts as OtherRoute. Every
// distinct value is a series kept for ever, and the route of a Store.Do call
// is its Request.Label, which an application may fill with anything: the
// limit keeps an exporter's memory and a scrape's size bounded whatever it
// is sent. A Routes is safe for concurrent use.
type Routes struct {
	max  int64
	n    atomic.Int64
	seen sync.Map // label -> struct{}
}

// NewRoutes returns a Routes that keeps at most max values; max <= 0 means
// DefaultMaxRoutes.
func NewRoutes(max int) *Routes {
	if max <= 0 {
		max = DefaultMaxRoutes
	}
	return &Routes{max: int64(max)}
}

// Label returns the route label value of route.
func (r *Routes) Label(route string) string {
	label := observe.Label(route)
	if _, ok := r.seen.Load(label); ok {
		return label
	}
	if r.n.Add(1) > r.max {
		r.n.Add(-1)
		return OtherRoute
	}
	if _, loaded := r.seen.LoadOrStore(label, struct{}{}); loaded {
		r.n.Add(-1)
	}
	return label
}
