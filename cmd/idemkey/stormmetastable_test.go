package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

// demo --storm --metastable: the same 5s slowdown of the provider, two
// arms. Naive retries keep the API's pool saturated after the provider is
// fast again (not recovered by the end of the run: metastable); a retry
// budget recovers. Both read from the JSON report. Then the HTML, arms
// overlaid and the window shaded, opened in headless Chromium: no console
// message, the shading on every chart, a line per arm on every chart.
// A long drill (IDEMKEY_LONG=1, so in .ci/run): 30s of a busy race build,
// a demonstration of figures more than a check of a path the default
// suite leaves uncovered (storm's incident tests cover the flags).
func TestDemoStormMetastable(t *testing.T) {
	redistest.Long(t)
	file := filepath.Join(t.TempDir(), "metastable.html")
	var stdout, stderr bytes.Buffer
	code := demo(t.Context(), []string{"--storm", "--metastable", "--json", "--report", file}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr:\n%s", stderr.String())

	var j struct {
		Verdict  string
		Policies []string
		Faults   []struct{ Fault string }
		Arms     []struct {
			Policy        string
			Amplification float64
			KeysFailed    int `json:"keys_failed"`
			Recovery      *struct {
				BaselineGoodput float64 `json:"baseline_goodput"`
				BaselineP99MS   float64 `json:"baseline_p99_ms"`
				Seconds         float64
				Recovered       bool
				Metastable      bool
			}
			Timeline []struct {
				T         int
				Completed int
				Timeouts  int
				P99MS     *float64 `json:"p99_ms"`
			}
		}
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &j), "%s", stdout.String())
	require.Equal(t, []string{"naive", "budget"}, j.Policies)
	require.Len(t, j.Faults, 1)
	require.Equal(t, "provider at=2s for=5s latency=300ms", j.Faults[0].Fault)
	require.Len(t, j.Arms, 2)
	for _, arm := range j.Arms {
		require.NotNil(t, arm.Recovery, arm.Policy)
		t.Logf("%s: amplification %.2f, recovery %+v", arm.Policy, arm.Amplification, *arm.Recovery)
		for _, s := range arm.Timeline {
			if s.P99MS != nil {
				t.Logf("  %s %2ds: %d completed, %d timeouts, p99 %.1fms", arm.Policy, s.T, s.Completed, s.Timeouts, *s.P99MS)
			}
		}
		require.Zero(t, arm.KeysFailed, "%s: no payment charged twice", arm.Policy)
	}
	naive, budget := j.Arms[0], j.Arms[1]
	require.False(t, naive.Recovery.Recovered, "naive's retries sustain the overload after the slowdown")
	require.True(t, naive.Recovery.Metastable)
	require.True(t, budget.Recovery.Recovered, "the budget's retries let the pool drain")
	require.Greater(t, naive.Amplification, 3.0)
	require.Less(t, budget.Amplification, naive.Amplification/2, "the budget bounds the retries")

	chromium := findChromium(t)
	dom, logs := headless(t, chromium, file, "--dump-dom")
	require.NotContains(t, logs, "Uncaught")
	require.NotRegexp(t, `(?i)console\(`, logs, "no console messages at all")
	require.Contains(t, dom, `<th>naive</th><th>budget</th>`, "the arms table")
	charts := regexp.MustCompile(`(?s)<svg id="chart-(\w+)".*?</svg>`).FindAllStringSubmatch(dom, -1)
	require.Len(t, charts, 4)
	for _, c := range charts {
		require.Equal(t, 1, strings.Count(c[0], `data-shade="fault"`), "%s: the slowdown shaded", c[1])
		require.Contains(t, c[0], `data-series="naive"`, c[1])
		require.Contains(t, c[0], `data-series="budget"`, c[1])
	}

	png := filepath.Join(t.TempDir(), "storm-metastable.png")
	_, logs = headless(t, chromium, file, "--hide-scrollbars", "--window-size=1000,1800", "--screenshot="+png)
	require.NotContains(t, logs, "Uncaught")
	img, err := os.ReadFile(png)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(img, []byte("\x89PNG\r\n\x1a\n")), "a PNG")
	if os.Getenv(screenshotEnv) == "1" {
		require.NoError(t, os.WriteFile(filepath.Join("..", "..", "docs", "storm-metastable.png"), img, 0o644))
	}
}

func TestDemoStormMetastableUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--metastable"},
		{"--storm", "--json"},
		{"--storm", "--metastable", "--rate", "10"},
		{"--storm", "--metastable", "extra"},
	} {
		var out, errOut bytes.Buffer
		require.Equal(t, 2, demo(t.Context(), args, &out, &errOut), "%v", args)
		require.NotEmpty(t, errOut.String())
	}
}
