package storm

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
)

// metricsContentType is the media type of the Prometheus text format.
const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// operationBuckets are the upper bounds, in seconds, of the operation
// latency histogram's buckets.
var operationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Metrics holds the live figures of load-mode storms (Config.Metrics,
// --metrics-addr) and writes them in the Prometheus text format, every
// name starting with idemkey_storm_:
//
//   - idemkey_storm_attempts_total{class}: attempts that ended, by answer
//     class (original, replay, in_progress, retry_later, mismatch,
//     client_error, server_error, timeout, transport_error); at the end of
//     a run they sum to the report's attempts;
//   - idemkey_storm_operations_scheduled_total, _started_total,
//     _completed_total, _failed_total and _late_total: the operations the
//     schedule reached, and what became of them, as the report counts them;
//   - idemkey_storm_amplification: attempts per operation started;
//   - idemkey_storm_attempts_in_flight: attempts sent and not yet answered;
//   - idemkey_storm_scheduled_rate: the arrival rate the schedule asks for
//     now, in operations per second (it follows Config.Stages); 0 between
//     runs;
//   - idemkey_storm_operation_duration_seconds: a histogram of the
//     operations' latency from their scheduled start, one observation per
//     operation that ended (one that never started counts the whole
//     Timeout, as in the report).
//
// The counters add up over the runs that report to one Metrics. It is safe
// for concurrent use; the zero value is ready to use, and a nil *Metrics
// records nothing.
type Metrics struct {
	attempts                                    [16]atomic.Uint64 // by index in classes
	scheduled, started, completed, failed, late atomic.Uint64
	inFlight                                    atomic.Int64
	run                                         atomic.Pointer[liveSchedule]
	latency                                     [16]atomic.Uint64 // per bucket of operationBuckets, then +Inf
	latencySum                                  atomic.Uint64     // float64 bits
}

// liveSchedule is the schedule of the run in progress, for the rate gauge.
type liveSchedule struct {
	sched schedule
	start time.Time
}

// NewMetrics returns Metrics with every figure at zero.
func NewMetrics() *Metrics { return &Metrics{} }

// ServeHTTP answers with the figures in the Prometheus text format.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", metricsContentType)
	if r.Method == http.MethodHead {
		return
	}
	_ = m.Write(w)
}

func (m *Metrics) begin(s schedule, start time.Time) {
	if m != nil {
		m.run.Store(&liveSchedule{sched: s, start: start})
	}
}

func (m *Metrics) end() {
	if m != nil {
		m.run.Store(nil)
	}
}

func (m *Metrics) attempt(c Class) {
	if m != nil {
		if i := slices.Index(classes, c); i >= 0 {
			m.attempts[i].Add(1)
		}
	}
}

func (m *Metrics) sending(delta int64) {
	if m != nil {
		m.inFlight.Add(delta)
	}
}

// counter names one of the operation counters, for add.
type counter int

const (
	counterScheduled counter = iota
	counterStarted
	counterLate
)

func (m *Metrics) add(c counter) {
	if m == nil {
		return
	}
	switch c {
	case counterScheduled:
		m.scheduled.Add(1)
	case counterStarted:
		m.started.Add(1)
	case counterLate:
		m.late.Add(1)
	}
}

// operationEnded counts an operation that ended, and its latency.
func (m *Metrics) operationEnded(started, failed bool, latency time.Duration) {
	if m == nil {
		return
	}
	switch {
	case started && failed:
		m.failed.Add(1)
	case started:
		m.completed.Add(1)
	}
	v := latency.Seconds()
	i, _ := slices.BinarySearch(operationBuckets, v) // the first bound >= v
	m.latency[i].Add(1)
	for {
		old := m.latencySum.Load()
		if m.latencySum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// Write writes the figures to w in the Prometheus text format, the
// families in name order.
func (m *Metrics) Write(w io.Writer) error {
	b := bufio.NewWriter(w)
	family := func(name, typ, help string) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	sample := func(name, labels string, v float64) {
		b.WriteString(name)
		b.WriteString(labels)
		b.WriteByte(' ')
		b.WriteString(formatMetric(v))
		b.WriteByte('\n')
	}
	var attempts [len(m.attempts)]uint64
	var total uint64
	for i := range classes {
		attempts[i] = m.attempts[i].Load()
		total += attempts[i]
	}
	started := m.started.Load()
	amp := 0.0
	if started > 0 {
		amp = float64(total) / float64(started)
	}
	rate := 0.0
	if run := m.run.Load(); run != nil {
		rate = run.sched.rateAt(time.Since(run.start))
	}

	family("idemkey_storm_amplification", "gauge", "Attempts per operation started.")
	sample("idemkey_storm_amplification", "", amp)
	family("idemkey_storm_attempts_in_flight", "gauge", "Attempts sent and not yet answered.")
	sample("idemkey_storm_attempts_in_flight", "", float64(m.inFlight.Load()))
	family("idemkey_storm_attempts_total", "counter", "Attempts that ended, by answer class.")
	order := slices.Clone(classes)
	slices.Sort(order)
	for _, c := range order {
		sample("idemkey_storm_attempts_total", `{class="`+string(c)+`"}`, float64(attempts[slices.Index(classes, c)]))
	}
	const hist = "idemkey_storm_operation_duration_seconds"
	family(hist, "histogram", "Latency of the operations that ended, from their scheduled start.")
	var n uint64
	for i := range len(operationBuckets) + 1 {
		n += m.latency[i].Load()
		le := "+Inf"
		if i < len(operationBuckets) {
			le = formatMetric(operationBuckets[i])
		}
		sample(hist+"_bucket", `{le="`+le+`"}`, float64(n))
	}
	sample(hist+"_sum", "", math.Float64frombits(m.latencySum.Load()))
	sample(hist+"_count", "", float64(n))
	for _, c := range []struct {
		name, help string
		v          *atomic.Uint64
	}{
		{"completed", "Operations every copy of which got a final answer.", &m.completed},
		{"failed", "Operations started and not completed.", &m.failed},
		{"late", "Operations whose first attempt waited for an in-flight slot.", &m.late},
		{"scheduled", "Operations the schedule has reached.", &m.scheduled},
		{"started", "Operations that sent an attempt.", &m.started},
	} {
		name := "idemkey_storm_operations_" + c.name + "_total"
		family(name, "counter", c.help)
		sample(name, "", float64(c.v.Load()))
	}
	family("idemkey_storm_scheduled_rate", "gauge", "The arrival rate the schedule asks for now, in operations per second.")
	sample("idemkey_storm_scheduled_rate", "", rate)
	return b.Flush()
}

// formatMetric renders a sample value as the text format writes them.
func formatMetric(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// checkMetricsAddr checks --metrics-addr: host:port on loopback (an
// empty host is 127.0.0.1). It returns the address to listen on.
func checkMetricsAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%q: want host:port, e.g. 127.0.0.1:9464", addr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", fmt.Errorf("%q: bad port", addr)
	}
	switch host {
	case "":
		host = "127.0.0.1"
	case "localhost":
	default:
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.IsLoopback() {
			return "", fmt.Errorf("%q: the metrics are served on loopback only (127.0.0.1, ::1 or localhost)", addr)
		}
	}
	return net.JoinHostPort(host, port), nil
}

// serveMetrics serves m at http://addr/metrics until stop is called, and
// says where on w.
func serveMetrics(addr string, m *Metrics, w io.Writer) (stop func(), err error) {
	addr, err = checkMetricsAddr(addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	fmt.Fprintf(w, "idemkey storm: metrics at http://%s/metrics\n", ln.Addr())
	return func() {
		// A scrape in progress gets its answer; a stuck one is cut.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}
