package storm

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// parseSamples reads the samples of a text exposition: "name{labels}" to
// value. It fails the test on a line it cannot read, a sample whose
// family has no HELP and TYPE before it, or a name without the storm's
// prefix.
func parseSamples(t *testing.T, text string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	typed := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			typed[strings.Fields(rest)[0]] = true
			continue
		}
		if strings.HasPrefix(line, "# HELP idemkey_storm_") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		require.True(t, ok, "line %q", line)
		require.True(t, strings.HasPrefix(series, "idemkey_storm_"), "line %q", line)
		name, _, _ := strings.Cut(series, "{")
		family := regexp.MustCompile(`_(bucket|sum|count)$`).ReplaceAllString(name, "")
		require.True(t, typed[name] || typed[family], "line %q before its TYPE", line)
		v, err := strconv.ParseFloat(value, 64)
		require.NoError(t, err, "line %q", line)
		out[series] = v
	}
	require.NoError(t, sc.Err())
	return out
}

// --metrics-addr serves the live figures while the storm runs: the target
// holds its first request until it has scraped them, so the scrape sees a
// run in progress, and the server is gone once the command has returned.
func TestMetricsScrapedDuringRun(t *testing.T) {
	var stderr syncBuffer
	addrRE := regexp.MustCompile(`metrics at (http://\S+/metrics)`)
	var once sync.Once
	var scraped string
	var scrapeErr error
	var url string
	inner := &idempotentServer{entries: map[string]*entry{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() {
			m := addrRE.FindStringSubmatch(stderr.String())
			if m == nil {
				scrapeErr = io.ErrUnexpectedEOF
				return
			}
			url = m[1]
			resp, err := http.Get(url)
			if err != nil {
				scrapeErr = err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			scraped, scrapeErr = string(b), err
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
				scrapeErr = io.ErrShortBuffer
			}
		})
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	var stdout strings.Builder
	code := Command(t.Context(), []string{"--url", srv.URL, "--rate", "20", "--duration", "3s", "--metrics-addr", "127.0.0.1:0"},
		&stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.NoError(t, scrapeErr, stderr.String())

	s := parseSamples(t, scraped)
	t.Logf("scraped during the run:\n%s", scraped)
	require.GreaterOrEqual(t, s["idemkey_storm_attempts_in_flight"], 1.0, "the held request is in flight")
	require.GreaterOrEqual(t, s["idemkey_storm_operations_started_total"], 1.0)
	require.GreaterOrEqual(t, s["idemkey_storm_operations_scheduled_total"], s["idemkey_storm_operations_started_total"])
	// The first request comes at the schedule's start, and the schedule
	// lasts seconds: the rate asked for is --rate's.
	require.Equal(t, 20.0, s["idemkey_storm_scheduled_rate"])
	for _, c := range classes {
		_, ok := s[`idemkey_storm_attempts_total{class="`+string(c)+`"}`]
		require.True(t, ok, "class %s", c)
	}
	_, ok := s[`idemkey_storm_operation_duration_seconds_bucket{le="+Inf"}`]
	require.True(t, ok)

	// The command has returned: nothing listens there any more.
	_, err := http.Get(url)
	require.Error(t, err)
}

// Run fills in Config.Metrics: at the end its totals are the report's.
func TestMetricsTotalsMatchReport(t *testing.T) {
	srv := newFlakyServer(t, 3)
	m := NewMetrics()
	rep, err := Run(t.Context(), Config{URL: srv.URL, Rate: 50, Duration: time.Second, Metrics: m, MaxInFlight: 8})
	require.NoError(t, err)
	var b strings.Builder
	require.NoError(t, m.Write(&b))
	s := parseSamples(t, b.String())
	ld := rep.Load
	attempts := 0.0
	for _, c := range classes {
		attempts += s[`idemkey_storm_attempts_total{class="`+string(c)+`"}`]
	}
	require.Equal(t, float64(ld.Attempts), attempts)
	require.Equal(t, float64(rep.RetryLater), s[`idemkey_storm_attempts_total{class="retry_later"}`])
	require.Positive(t, rep.RetryLater)
	o := ld.Operations
	require.Equal(t, float64(o.Scheduled), s["idemkey_storm_operations_scheduled_total"])
	require.Equal(t, float64(o.Started), s["idemkey_storm_operations_started_total"])
	require.Equal(t, float64(o.Completed), s["idemkey_storm_operations_completed_total"])
	require.Equal(t, float64(o.Failed), s["idemkey_storm_operations_failed_total"])
	require.Equal(t, float64(o.Late), s["idemkey_storm_operations_late_total"])
	require.Equal(t, float64(o.Scheduled), s["idemkey_storm_operation_duration_seconds_count"])
	require.InDelta(t, ld.Amplification, s["idemkey_storm_amplification"], 1e-9)
	require.Zero(t, s["idemkey_storm_attempts_in_flight"])
	require.Zero(t, s["idemkey_storm_scheduled_rate"], "no run in progress")

	// A nil *Metrics records nothing, and a Run without Metrics is as before.
	var none *Metrics
	none.attempt(ClassOriginal)
	none.add(counterStarted)
	none.operationEnded(true, false, time.Millisecond)
	none.begin(schedule{}, time.Now())
	none.end()
	none.sending(1)
}
