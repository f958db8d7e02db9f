package storm

import (
	"encoding/csv"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// flakyServer answers every nth request 503 with "Retry-After: 0" without
// running it, and passes the others to a correct idempotent endpoint: a run
// with retries, and more than one answer class.
func newFlakyServer(t *testing.T, n int64) *httptest.Server {
	t.Helper()
	inner := &idempotentServer{entries: map[string]*entry{}}
	var seen atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if seen.Add(1)%n == 0 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The CSV timeline has a header row and one row per second, and its
// columns add up to the JSON report's totals.
func TestCSVTimelineMatchesJSON(t *testing.T) {
	srv := newFlakyServer(t, 4)
	path := filepath.Join(t.TempDir(), "timeline.csv")
	code, j, stderr := runLoadJSON(t, "--url", srv.URL, "--rate", "40", "--duration", "2s", "--backoff", "1ms,5ms", "--csv", path)
	require.Equal(t, 0, code, stderr)
	require.Positive(t, j.RetryLater, "the flaky server answered 503s")

	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.Equal(t, csvColumns, rows[0])
	require.Len(t, rows[1:], len(j.Timeline), "one row per second")

	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	sum := map[string]int{}
	for i, row := range rows[1:] {
		require.Len(t, row, len(csvColumns))
		require.Empty(t, row[col["arm"]], "one arm, without a named policy")
		require.Equal(t, strconv.Itoa(j.Timeline[i].T), row[col["t"]])
		for _, name := range csvColumns {
			switch name {
			case "arm", "amplification", "p50_ms", "p99_ms":
				continue
			}
			n, err := strconv.Atoi(row[col[name]])
			require.NoError(t, err, "row %d column %s", i, name)
			sum[name] += n
		}
		if a := j.Timeline[i].Amplification; a != nil {
			got, err := strconv.ParseFloat(row[col["amplification"]], 64)
			require.NoError(t, err)
			require.Equal(t, *a, got)
			p99, err := strconv.ParseFloat(row[col["p99_ms"]], 64)
			require.NoError(t, err)
			require.Equal(t, *j.Timeline[i].P99MS, p99)
		} else {
			require.Empty(t, row[col["amplification"]])
			require.Empty(t, row[col["p99_ms"]])
		}
	}
	classes := sum["originals"] + sum["replays"] + sum["in_progress"] + sum["retry_later"] + sum["server_errors"] +
		sum["timeouts"] + sum["transport_errors"]
	require.Equal(t, j.Attempts, sum["attempts"])
	require.Equal(t, j.Attempts, classes, "the classes partition the attempts")
	require.Equal(t, j.Operations.Scheduled, sum["scheduled"])
	require.Equal(t, j.Operations.Scheduled, sum["operations"])
	require.Equal(t, j.Operations.Started, sum["started"])
	require.Equal(t, j.Operations.Late, sum["late"])
	require.Equal(t, j.RetryLater, sum["retry_later"])
}

func TestCSVNeedsALoadReport(t *testing.T) {
	var b strings.Builder
	require.Error(t, (&Report{}).WriteCSV(&b))
	require.Empty(t, b.String())
}

// storm/README.md documents every column of the CSV timeline.
func TestCSVColumnsDocumented(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	for _, name := range csvColumns {
		require.Regexp(t, regexp.MustCompile("(?m)^\\| `"+name+"` \\|"), string(readme), "column %s", name)
	}
}
