package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/storm"
)

// chromiumEnv makes the browser test fail, rather than skip, without
// chromium (CI sets it).
const chromiumEnv = "IDEMKEY_REQUIRE_CHROMIUM"

// screenshotEnv makes TestDemoStormReportInChromium write its screenshot
// to docs/storm-report.png, the picture the docs show.
const screenshotEnv = "IDEMKEY_WRITE_SCREENSHOT"

// findChromium returns the headless browser to use, or skips.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(chromiumEnv) == "1" {
		t.Fatalf("chromium not found and %s=1", chromiumEnv)
	}
	t.Skipf("chromium not found (apt-get install chromium); set %s=1 to fail instead", chromiumEnv)
	return ""
}

// headless runs chromium on the file with extra arguments, bounded in
// time, and returns its stdout and stderr.
func headless(t *testing.T, chromium, file string, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
		"--user-data-dir=" + t.TempDir(), "--enable-logging=stderr", "--v=0"}
	cmd := exec.CommandContext(ctx, chromium, append(append(base, args...), "file://"+file)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), "chromium: %s", errOut.String())
	return out.String(), errOut.String()
}

// demo --storm's HTML report, opened in a real browser: it renders with no
// console error, and its charts hold the run's numbers.
func TestDemoStormReportInChromium(t *testing.T) {
	chromium := findChromium(t)
	file := filepath.Join(t.TempDir(), "storm.html")
	var stdout, stderr bytes.Buffer
	// Timeouts far above what a payment takes outside the slow window,
	// even in a race build on a busy machine (a storm that makes the
	// server slower than the clients' patience outside it collapses, as
	// storms do; that is not what this test is about), and far below the
	// slow provider's latency.
	code, rep := stormDemo(t.Context(), stormDemoConfig{rate: 20, duration: 5 * time.Second, latency: 5 * time.Millisecond,
		slowAt: 1500 * time.Millisecond, slowFor: 1500 * time.Millisecond, slowLatency: 2500 * time.Millisecond,
		attemptTimeout: time.Second, retries: 10, report: file}, &stdout, &stderr)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	require.NotNil(t, rep)
	require.Equal(t, storm.VerdictPass, rep.Verdict())
	require.Contains(t, stdout.String(), "exactly once: PASS (100 payments, 100 charges;")
	require.Greater(t, rep.Load.Amplification, 1.0, "the slow provider made retries")
	require.Positive(t, rep.Timeouts)

	dom, logs := headless(t, chromium, file, "--dump-dom")
	require.NotContains(t, logs, "Uncaught")
	require.NotRegexp(t, `(?i)console\(`, logs, "no console messages at all")
	require.Contains(t, dom, `data-verdict="pass"`)

	// The stacked bars: one per (second, class) with a count, and nothing
	// else.
	bars := map[string]int{}
	for _, m := range regexp.MustCompile(`<rect [^>]*data-t="(\d+)" data-class="(\w+)" data-count="(\d+)"`).FindAllStringSubmatch(dom, -1) {
		n, _ := strconv.Atoi(m[3])
		bars[m[1]+"/"+m[2]] = n
	}
	want := map[string]int{}
	for _, s := range rep.Load.Timeline {
		for class, n := range map[string]int{"originals": s.Originals, "replays": s.Replays, "in_progress": s.InProgress,
			"retry_later": s.RetryLater, "server_errors": s.ServerErrors, "timeouts": s.Timeouts, "transport_errors": s.TransportErrors} {
			if n > 0 {
				want[strconv.Itoa(s.T)+"/"+class] = n
			}
		}
	}
	require.Equal(t, want, bars, "the attempts chart holds the timeline's counts")

	// The points of the latency and amplification lines.
	points := map[string]float64{}
	for _, m := range regexp.MustCompile(`<circle [^>]*data-series="(\w+)" data-t="(\d+)" data-value="([0-9.]+)"`).FindAllStringSubmatch(dom, -1) {
		v, err := strconv.ParseFloat(m[3], 64)
		require.NoError(t, err)
		points[m[1]+"/"+m[2]] = v
	}
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)) / 1000 }
	wantPoints := map[string]float64{}
	for _, s := range rep.Load.Timeline {
		a, ok := s.Amplification()
		if !ok {
			continue
		}
		k := strconv.Itoa(s.T)
		wantPoints["p50/"+k], wantPoints["p99/"+k] = ms(s.P50), ms(s.P99)
		wantPoints["amplification/"+k] = math.Round(a*1000) / 1000
	}
	require.Equal(t, wantPoints, points, "the latency and amplification charts hold the timeline's figures")
	peak := 0.0
	for k, v := range points {
		if strings.HasPrefix(k, "amplification/") {
			peak = max(peak, v)
		}
	}
	require.Greater(t, peak, 1.5, "the spike is in the picture")

	png := filepath.Join(t.TempDir(), "storm-report.png")
	_, logs = headless(t, chromium, file, "--hide-scrollbars", "--window-size=1000,1380", "--screenshot="+png)
	require.NotContains(t, logs, "Uncaught")
	img, err := os.ReadFile(png)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(img, []byte("\x89PNG\r\n\x1a\n")), "a PNG")
	if os.Getenv(screenshotEnv) == "1" {
		require.NoError(t, os.WriteFile(filepath.Join("..", "..", "docs", "storm-report.png"), img, 0o644))
	}
}

func TestDemoStormUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--storm", "--flaky"},
		{"--storm", "--rate", "0"},
		{"--storm", "--duration", "0s"},
		{"--storm", "--attempt-timeout", "0s"},
		{"--storm", "--retries", "-1"},
		{"--storm", "extra"},
	} {
		var out, errOut bytes.Buffer
		require.Equal(t, 2, demo(t.Context(), args, &out, &errOut), "%v", args)
		require.NotEmpty(t, errOut.String())
	}
}
