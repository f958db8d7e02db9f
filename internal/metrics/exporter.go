// Package metrics is 'idemkey serve”s exporter: an observe.Observer that
// keeps idemkey's metrics (package observe/metrics) in memory and writes
// them in the Prometheus text format, with the standard library only (the
// core module must not depend on client_golang).
package metrics

import (
	"bufio"
	"cmp"
	"context"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/idemkey/idemkey/observe"
	spec "github.com/idemkey/idemkey/observe/metrics"
)

// ContentType is the media type of the Prometheus text format that
// Exporter writes.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Exporter is an observe.Observer that keeps the metrics of package
// observe/metrics in memory and writes them in the Prometheus text format.
// Its output for a sequence of events is byte for byte what the prometheus
// module's Observer, registered alone, gives for the same events; its route
// label is bounded as that one's is (metrics.Routes, with the default
// limit). It is safe for concurrent use; the zero value is not: use
// NewExporter.
type Exporter struct {
	requests, takeovers, fenced counterVec
	redis                       histogramVec
	leases                      atomic.Int64
	routes                      *spec.Routes
}

// NewExporter returns an Exporter with every metric at zero.
func NewExporter() *Exporter {
	x := &Exporter{routes: spec.NewRoutes(0)}
	x.requests.m = map[[2]string]*atomic.Uint64{}
	x.takeovers.m = map[[2]string]*atomic.Uint64{}
	x.fenced.m = map[[2]string]*atomic.Uint64{}
	x.redis.m = map[string]*histogram{}
	return x
}

var _ observe.Observer = (*Exporter)(nil)

// Event counts e.
func (x *Exporter) Event(_ context.Context, e *observe.Event) {
	if o := spec.Outcome(e.Kind); o != "" || e.Kind == observe.TookOver {
		route := x.routes.Label(e.Route)
		if o != "" {
			x.requests.inc(route, o)
		}
		switch e.Kind {
		case observe.TookOver:
			x.takeovers.inc(route, "")
		case observe.Fenced:
			x.fenced.inc(route, "")
		}
	}
	if d := spec.LeaseDelta(e.Kind); d != 0 {
		x.leases.Add(int64(d))
	}
}

// Redis records the call's duration.
func (x *Exporter) Redis(_ context.Context, c *observe.Call) {
	x.redis.get(c.Script).observe(c.Duration.Seconds())
}

// ServeHTTP answers with the metrics in the Prometheus text format.
func (x *Exporter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", ContentType)
	if r.Method == http.MethodHead {
		return
	}
	_ = x.Write(w)
}

// Write writes the metrics in the Prometheus text format: the families in
// name order, each series in the order of its label values, and no family
// that has no series yet (as client_golang does).
func (x *Exporter) Write(w io.Writer) error {
	b := bufio.NewWriter(w)
	for _, m := range spec.All {
		switch m {
		case &spec.Fenced:
			x.fenced.write(b, m)
		case &spec.LeasesHeld:
			header(b, m)
			b.WriteString(m.Name)
			b.WriteByte(' ')
			b.WriteString(formatFloat(float64(x.leases.Load())))
			b.WriteByte('\n')
		case &spec.RedisSeconds:
			x.redis.write(b, m)
		case &spec.Requests:
			x.requests.write(b, m)
		case &spec.Takeovers:
			x.takeovers.write(b, m)
		}
	}
	return b.Flush()
}

// counterVec is a counter with one or two labels.
type counterVec struct {
	mu sync.RWMutex
	m  map[[2]string]*atomic.Uint64
}

func (v *counterVec) inc(a, b string) {
	k := [2]string{a, b}
	v.mu.RLock()
	c := v.m[k]
	v.mu.RUnlock()
	if c == nil {
		v.mu.Lock()
		if c = v.m[k]; c == nil {
			c = new(atomic.Uint64)
			v.m[k] = c
		}
		v.mu.Unlock()
	}
	c.Add(1)
}

type series struct {
	labels [][2]string // name, value; sorted by name
	value  float64
}

func (v *counterVec) write(b *bufio.Writer, m *spec.Metric) {
	v.mu.RLock()
	all := make([]series, 0, len(v.m))
	for k, c := range v.m {
		s := series{value: float64(c.Load())}
		for i, name := range m.Labels {
			s.labels = append(s.labels, [2]string{name, k[i]})
		}
		slices.SortFunc(s.labels, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
		all = append(all, s)
	}
	v.mu.RUnlock()
	if len(all) == 0 {
		return
	}
	slices.SortFunc(all, func(a, b series) int {
		for i := range a.labels {
			if c := strings.Compare(a.labels[i][1], b.labels[i][1]); c != 0 {
				return c
			}
		}
		return 0
	})
	header(b, m)
	for _, s := range all {
		b.WriteString(m.Name)
		writeLabels(b, s.labels, "")
		b.WriteByte(' ')
		b.WriteString(formatFloat(s.value))
		b.WriteByte('\n')
	}
}

// histogram is one series of idemkey_redis_seconds. Its count is the sum of
// its buckets at the time it is written, so that the +Inf bucket and the
// count always agree.
type histogram struct {
	buckets [](atomic.Uint64) // per bucket, not cumulative; the last is +Inf
	sum     atomic.Uint64     // float64 bits
}

func (h *histogram) observe(v float64) {
	i, _ := slices.BinarySearch(spec.RedisBuckets, v) // the first bound >= v
	h.buckets[i].Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

type histogramVec struct {
	mu sync.RWMutex
	m  map[string]*histogram
}

func (v *histogramVec) get(script string) *histogram {
	v.mu.RLock()
	h := v.m[script]
	v.mu.RUnlock()
	if h != nil {
		return h
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if h = v.m[script]; h == nil {
		h = &histogram{buckets: make([]atomic.Uint64, len(spec.RedisBuckets)+1)}
		v.m[script] = h
	}
	return h
}

func (v *histogramVec) write(b *bufio.Writer, m *spec.Metric) {
	type entry struct {
		script string
		h      *histogram
	}
	v.mu.RLock()
	all := make([]entry, 0, len(v.m))
	for s, h := range v.m {
		all = append(all, entry{s, h})
	}
	v.mu.RUnlock()
	if len(all) == 0 {
		return
	}
	slices.SortFunc(all, func(a, b entry) int { return cmp.Compare(a.script, b.script) })
	header(b, m)
	for _, e := range all {
		labels := [][2]string{{m.Labels[0], e.script}}
		var n uint64
		for i := range e.h.buckets {
			n += e.h.buckets[i].Load()
			le := "+Inf"
			if i < len(spec.RedisBuckets) {
				le = formatFloat(spec.RedisBuckets[i])
			}
			b.WriteString(m.Name)
			b.WriteString("_bucket")
			writeLabels(b, labels, le)
			b.WriteByte(' ')
			b.WriteString(strconv.FormatUint(n, 10))
			b.WriteByte('\n')
		}
		b.WriteString(m.Name)
		b.WriteString("_sum")
		writeLabels(b, labels, "")
		b.WriteByte(' ')
		b.WriteString(formatFloat(math.Float64frombits(e.h.sum.Load())))
		b.WriteByte('\n')
		b.WriteString(m.Name)
		b.WriteString("_count")
		writeLabels(b, labels, "")
		b.WriteByte(' ')
		b.WriteString(strconv.FormatUint(n, 10))
		b.WriteByte('\n')
	}
}

func header(b *bufio.Writer, m *spec.Metric) {
	b.WriteString("# HELP ")
	b.WriteString(m.Name)
	b.WriteByte(' ')
	b.WriteString(helpEscaper.Replace(m.Help))
	b.WriteString("\n# TYPE ")
	b.WriteString(m.Name)
	b.WriteByte(' ')
	b.WriteString(string(m.Type))
	b.WriteByte('\n')
}

// writeLabels writes {name="value",...}, with le last when it is set.
func writeLabels(b *bufio.Writer, labels [][2]string, le string) {
	if len(labels) == 0 && le == "" {
		return
	}
	b.WriteByte('{')
	for i, l := range labels {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l[0])
		b.WriteString(`="`)
		b.WriteString(valueEscaper.Replace(l[1]))
		b.WriteByte('"')
	}
	if le != "" {
		if len(labels) > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`le="`)
		b.WriteString(le)
		b.WriteByte('"')
	}
	b.WriteByte('}')
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	valueEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

// formatFloat formats v as the text format (and client_golang) does.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, +1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
