package metrics_test

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/metrics"
	"github.com/idemkey/idemkey/internal/observetest"
)

var routeLabel = regexp.MustCompile(`route="((?:[^"\\]|\\.)*)"`)

// routes returns the route label values of the exporter's text, and fails
// the test if the text is not valid UTF-8.
func routes(t *testing.T, x *metrics.Exporter) map[string]bool {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, x.Write(&b))
	out := map[string]bool{}
	for line := range strings.Lines(b.String()) {
		require.True(t, utf8.ValidString(line), "not valid UTF-8: %q", line)
		for _, m := range routeLabel.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// Regression: 'idemkey serve”s exporter wrote the raw path of
// a request no pattern matched into the route label: text that is not valid
// UTF-8 for POST /%FF (a scrape refuses it), and a series per path.
func TestExporterHostilePaths(t *testing.T) {
	x := metrics.NewExporter()
	observetest.Hostile(t, observetest.Config{Observer: x})
	require.Equal(t, map[string]bool{observetest.UnmatchedRoute: true, observetest.ItemsRoute: true,
		strings.ToValidUTF8(observetest.BadLabel, "\uFFFD"): true}, routes(t, x))
}
