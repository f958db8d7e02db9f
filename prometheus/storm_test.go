package prometheus

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/storm"
)

// flakyProvider is an idempotent endpoint that answers every third
// request 503 (Retry-After: 0) and lets every seventh hang until the
// client gives up, so that a storm sees several answer classes and retries.
func flakyProvider(t *testing.T) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	done := map[string]bool{}
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1)
		switch {
		case i%3 == 0:
			w.Header().Set("Retry-After", "0")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		case i%7 == 0:
			<-r.Context().Done()
			return
		}
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		replay := done[key]
		done[key] = true
		mu.Unlock()
		if replay {
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusCreated)
		} else {
			w.WriteHeader(http.StatusCreated)
		}
		_, _ = io.WriteString(w, `{"id":"`+key+`"}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// stormReport is what the test reads of storm's JSON report.
type stormReport struct {
	Attempts      int     `json:"attempts"`
	Amplification float64 `json:"amplification"`
	Operations    struct {
		Scheduled, Started, Completed, Failed, Late int
	} `json:"operations"`
	Timeline []struct {
		Scheduled       int `json:"scheduled"`
		Originals       int `json:"originals"`
		Replays         int `json:"replays"`
		InProgress      int `json:"in_progress"`
		RetryLater      int `json:"retry_later"`
		ServerErrors    int `json:"server_errors"`
		Timeouts        int `json:"timeouts"`
		TransportErrors int `json:"transport_errors"`
	} `json:"timeline"`
}

// storm's live figures (storm.Metrics, idemkey storm --metrics-addr) are
// written by hand in the core module; here the Prometheus libraries read
// them: the text parses, passes the linter, every name has the storm's
// prefix, and at the end of a run the totals are the JSON report's.
func TestStormMetricsParseAndMatchTheReport(t *testing.T) {
	srv := flakyProvider(t)
	m := storm.NewMetrics()
	rep, err := storm.Run(t.Context(), storm.Config{
		URL: srv.URL, Stages: []storm.Stage{{Duration: time.Second, Rate: 60}, {Duration: 500 * time.Millisecond, Rate: 60}},
		AttemptTimeout: 200 * time.Millisecond, Retries: 5, Metrics: m, NoProbe: true,
	})
	require.NoError(t, err)
	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	var j stormReport
	require.NoError(t, json.Unmarshal(js.Bytes(), &j))

	scrape := httptest.NewServer(m)
	defer scrape.Close()
	resp, err := http.Get(scrape.URL)
	require.NoError(t, err)
	text, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	require.Equal(t, expfmt.TypeTextPlain, expfmt.ResponseFormat(resp.Header).FormatType())

	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	require.NoError(t, err, "%s", text)
	var all []*dto.MetricFamily
	for name, mf := range families {
		require.True(t, strings.HasPrefix(name, "idemkey_storm_"), name)
		all = append(all, mf)
	}
	problems, err := testutil.GatherAndLint(prom.GathererFunc(func() ([]*dto.MetricFamily, error) { return all, nil }))
	require.NoError(t, err)
	require.Empty(t, problems)

	value := func(name string, labels ...string) float64 {
		t.Helper()
		mf := families[name]
		require.NotNil(t, mf, name)
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}
				if !found {
					continue metrics
				}
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
		t.Fatalf("no series %s%v", name, labels)
		return 0
	}
	class := func(c string) float64 { return value("idemkey_storm_attempts_total", "class", c) }
	var want struct{ originals, replays, inProgress, retryLater, serverErrors, timeouts, transportErrors, scheduled int }
	for _, s := range j.Timeline {
		want.originals += s.Originals
		want.replays += s.Replays
		want.inProgress += s.InProgress
		want.retryLater += s.RetryLater
		want.serverErrors += s.ServerErrors
		want.timeouts += s.Timeouts
		want.transportErrors += s.TransportErrors
		want.scheduled += s.Scheduled
	}
	t.Logf("attempts %d: %+v", j.Attempts, want)
	require.Positive(t, want.retryLater, "the provider's 503s")
	require.Positive(t, want.timeouts, "the provider's hung requests")

	// The timeline's originals include the other executions (mismatch,
	// client errors) that the metric names apart.
	require.Equal(t, float64(want.originals), class("original")+class("mismatch")+class("client_error"))
	require.Equal(t, float64(want.replays), class("replay"))
	require.Equal(t, float64(want.inProgress), class("in_progress"))
	require.Equal(t, float64(want.retryLater), class("retry_later"))
	require.Equal(t, float64(want.serverErrors), class("server_error"))
	require.Equal(t, float64(want.timeouts), class("timeout"))
	require.Equal(t, float64(want.transportErrors), class("transport_error"))
	total := 0.0
	for _, mt := range families["idemkey_storm_attempts_total"].GetMetric() {
		total += mt.GetCounter().GetValue()
	}
	require.Equal(t, float64(j.Attempts), total)

	o := j.Operations
	require.Equal(t, float64(o.Scheduled), value("idemkey_storm_operations_scheduled_total"))
	require.Equal(t, float64(want.scheduled), value("idemkey_storm_operations_scheduled_total"))
	require.Equal(t, float64(o.Started), value("idemkey_storm_operations_started_total"))
	require.Equal(t, float64(o.Completed), value("idemkey_storm_operations_completed_total"))
	require.Equal(t, float64(o.Failed), value("idemkey_storm_operations_failed_total"))
	require.Equal(t, float64(o.Late), value("idemkey_storm_operations_late_total"))
	require.Equal(t, float64(o.Scheduled), value("idemkey_storm_operation_duration_seconds"), "one observation per operation")
	require.InDelta(t, j.Amplification, value("idemkey_storm_amplification"), 0.0005, "the JSON's is rounded to 3 decimals")
	require.Zero(t, value("idemkey_storm_attempts_in_flight"))
	require.Zero(t, value("idemkey_storm_scheduled_rate"), "the run is over")
}
