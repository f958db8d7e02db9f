package metrics

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/observe"
	spec "github.com/idemkey/idemkey/observe/metrics"
)

func event(kind observe.Kind, route string) *observe.Event {
	e := observe.NewEvent(kind, "scope", "key")
	e.Route = route
	return &e
}

func TestExporterText(t *testing.T) {
	x := NewExporter()
	ctx := context.Background()
	for _, k := range []observe.Kind{observe.Claimed, observe.Completed, observe.Replayed, observe.Replayed, observe.TookOver} {
		x.Event(ctx, event(k, "POST /b"))
	}
	x.Event(ctx, event(observe.Fenced, `POST /a "x"\`+"\n"))
	x.Redis(ctx, &observe.Call{Script: "complete", Duration: 250 * time.Microsecond})
	x.Redis(ctx, &observe.Call{Script: "claim", Duration: 3 * time.Second})
	var b bytes.Buffer
	require.NoError(t, x.Write(&b))
	buckets := func(script string, counts ...string) string {
		var s strings.Builder
		for i, le := range []string{"0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "+Inf"} {
			s.WriteString(`idemkey_redis_seconds_bucket{script="` + script + `",le="` + le + `"} ` + counts[i] + "\n")
		}
		return s.String()
	}
	zeros := func(n int, rest ...string) []string {
		return append(strings.Split(strings.Repeat("0,", n), ",")[:n], rest...)
	}
	want := "# HELP idemkey_fenced_total " + spec.Fenced.Help + "\n" +
		"# TYPE idemkey_fenced_total counter\n" +
		`idemkey_fenced_total{route="POST /a \"x\"\\\n"} 1` + "\n" +
		"# HELP idemkey_leases_held " + spec.LeasesHeld.Help + "\n" +
		"# TYPE idemkey_leases_held gauge\n" +
		"idemkey_leases_held 0\n" + // claimed, completed, took over, fenced
		"# HELP idemkey_redis_seconds " + spec.RedisSeconds.Help + "\n" +
		"# TYPE idemkey_redis_seconds histogram\n" +
		buckets("claim", zeros(14, "1")...) +
		`idemkey_redis_seconds_sum{script="claim"} 3` + "\n" +
		`idemkey_redis_seconds_count{script="claim"} 1` + "\n" +
		buckets("complete", append(zeros(1), "1", "1", "1", "1", "1", "1", "1", "1", "1", "1", "1", "1", "1", "1")...) +
		`idemkey_redis_seconds_sum{script="complete"} 0.00025` + "\n" +
		`idemkey_redis_seconds_count{script="complete"} 1` + "\n" +
		"# HELP idemkey_requests_total " + spec.Requests.Help + "\n" +
		"# TYPE idemkey_requests_total counter\n" +
		`idemkey_requests_total{outcome="executed",route="POST /a \"x\"\\\n"} 1` + "\n" +
		`idemkey_requests_total{outcome="executed",route="POST /b"} 1` + "\n" +
		`idemkey_requests_total{outcome="replayed",route="POST /b"} 2` + "\n" +
		"# HELP idemkey_takeovers_total " + spec.Takeovers.Help + "\n" +
		"# TYPE idemkey_takeovers_total counter\n" +
		`idemkey_takeovers_total{route="POST /b"} 1` + "\n"
	require.Equal(t, want, b.String())
}

func TestExporterServeHTTP(t *testing.T) {
	x := NewExporter()
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		w := httptest.NewRecorder()
		x.ServeHTTP(w, httptest.NewRequest(method, "/metrics", nil))
		require.Equal(t, http.StatusOK, w.Code)
		require.Equal(t, ContentType, w.Header().Get("Content-Type"))
		if method == http.MethodGet {
			require.Equal(t, "# HELP idemkey_leases_held "+spec.LeasesHeld.Help+"\n# TYPE idemkey_leases_held gauge\nidemkey_leases_held 0\n", w.Body.String())
		} else {
			require.Empty(t, w.Body.String())
		}
	}
}

// Events, calls and scrapes at once: nothing lost, and every scrape's
// histogram agrees with itself.
func TestExporterConcurrent(t *testing.T) {
	x := NewExporter()
	ctx := context.Background()
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			route := []string{"POST /a", "POST /b"}[g%2]
			for range each {
				x.Event(ctx, event(observe.Claimed, route))
				x.Redis(ctx, &observe.Call{Script: "claim", Duration: time.Millisecond})
				x.Event(ctx, event(observe.Completed, route))
			}
		})
	}
	scrapes := make(chan string)
	go func() {
		defer close(scrapes)
		for range 20 {
			var b bytes.Buffer
			_ = x.Write(&b)
			scrapes <- b.String()
		}
	}()
	for s := range scrapes {
		var inf, count string
		for line := range strings.Lines(s) {
			if v, ok := strings.CutPrefix(line, `idemkey_redis_seconds_bucket{script="claim",le="+Inf"} `); ok {
				inf = v
			}
			if v, ok := strings.CutPrefix(line, `idemkey_redis_seconds_count{script="claim"} `); ok {
				count = v
			}
		}
		require.Equal(t, inf, count)
	}
	wg.Wait()
	var b bytes.Buffer
	require.NoError(t, x.Write(&b))
	require.Contains(t, b.String(), `idemkey_requests_total{outcome="executed",route="POST /a"} 2000`+"\n")
	require.Contains(t, b.String(), `idemkey_requests_total{outcome="executed",route="POST /b"} 2000`+"\n")
	require.Contains(t, b.String(), `idemkey_redis_seconds_count{script="claim"} 4000`+"\n")
	require.Contains(t, b.String(), "idemkey_leases_held 0\n")
}
