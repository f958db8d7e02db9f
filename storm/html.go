package storm

import (
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The HTML report: one self-contained file, nothing fetched from the
// network. The charts are inline SVG drawn here from the run's own figures;
// every bar and point carries its number in data-* attributes (and a
// <title> tooltip), so a test can read the numbers back from the page a
// browser rendered.

//go:embed report.html.tmpl
var reportHTML string

var reportTemplate = template.Must(template.New("report").Parse(reportHTML))

// answerClass is one stacked class of the attempts chart.
type answerClass struct {
	Name  string // as in the JSON timeline
	Label string
	Color string
	count func(Second) int
}

var answerClasses = []answerClass{
	{"originals", "original", "#2e7d32", func(s Second) int { return s.Originals }},
	{"replays", "replay", "#66bb6a", func(s Second) int { return s.Replays }},
	{"in_progress", "in progress (409)", "#ffb300", func(s Second) int { return s.InProgress }},
	{"retry_later", "retry later (408, 425, 429, 503)", "#fb8c00", func(s Second) int { return s.RetryLater }},
	{"server_errors", "5xx", "#8e24aa", func(s Second) int { return s.ServerErrors }},
	{"timeouts", "timeout", "#e53935", func(s Second) int { return s.Timeouts }},
	{"transport_errors", "transport error", "#6d4c41", func(s Second) int { return s.TransportErrors }},
}

// chart geometry, in SVG user units
const (
	chartW, chartH = 900.0, 220.0
	padL, padB     = 56.0, 24.0
	padT, padR     = 10.0, 10.0
)

type svgRect struct {
	X, Y, W, H float64
	Fill       string
	T          int
	Class      string
	Count      int
}

type svgPoint struct {
	X, Y  float64
	T     int
	Value float64
	Label string
}

type svgTick struct {
	Pos   float64
	Label string
}

type svgSeries struct {
	Name   string
	Color  string
	Path   string
	Points []svgPoint
}

type chart struct {
	ID     string
	Title  string
	Unit   string
	Rects  []svgRect
	Series []svgSeries
	YTicks []svgTick
	XTicks []svgTick
	RefY   float64 // a reference line (amplification 1), when HasRef
	HasRef bool
	Shades []svgShade // fault windows and events (htmlincident.go)
	top    float64
}

type legendItem struct{ Label, Color, Name string }

type htmlRow struct{ Label, Value string }

type htmlView struct {
	Title      string
	Verdict    string
	VerdictCSS string
	Why        string
	Target     string
	Setup      string
	Rows       []htmlRow
	Thresholds []Threshold
	Note       string
	Charts     []chart
	Legend     []legendItem
	Started    string
	Failures   []Failure

	// an incident's (htmlincident.go)
	ShadeLegend []legendItem
	ArmsHead    []string
	ArmsRows    []htmlArmRow
	ArmLegend   []legendItem
}

// WriteHTML writes the report as one self-contained HTML page: the verdict
// and the summary on top, then charts over time (attempts per second
// stacked by answer class, operation latency p50 and p99, amplification).
// It fails for a report without load mode's figures.
func (r *Report) WriteHTML(w io.Writer) error {
	if len(r.Arms) > 0 {
		return reportTemplate.Execute(w, r.armsView())
	}
	if r.Load == nil {
		return errors.New("an HTML report needs load mode's figures (--rate or --duration)")
	}
	return reportTemplate.Execute(w, r.htmlView())
}

// WriteHTMLFile writes WriteHTML's page to the file at path, replacing it.
func (r *Report) WriteHTMLFile(path string) error {
	var b strings.Builder
	if err := r.WriteHTML(&b); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".storm-report-*")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(b.String()); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	_ = os.Chmod(tmp.Name(), 0o644)
	return os.Rename(tmp.Name(), path)
}

func (r *Report) htmlView() htmlView {
	ld := r.Load
	v := htmlView{
		Title:   "idemkey storm: " + r.Method + " " + r.URL,
		Target:  r.Method + " " + r.URL,
		Started: r.Started.UTC().Format(time.RFC3339),
	}
	switch r.Verdict() {
	case VerdictPass:
		v.Verdict, v.VerdictCSS = "PASS", "pass"
		v.Why = fmt.Sprintf("every one of %d keys ran at most once, and every final answer was identical", r.Keys)
	case VerdictFail:
		v.Verdict, v.VerdictCSS = "FAIL", "fail"
		v.Why = strings.Join(r.failWhy(), "; ")
	default:
		v.Verdict, v.VerdictCSS = "INCONCLUSIVE", "inconclusive"
		v.Why = strings.Join(r.inconclusiveWhy(), "; ")
	}
	if len(r.BrokenThresholds()) > 0 {
		v.Why += "; thresholds broken"
	}
	v.Setup = fmt.Sprintf("%s (%d scheduled) × %d dups, max in flight %d, attempt timeout %s, timeout %s, retries %d",
		loadShape(ld.Rate, ld.Duration, ld.Stages), ld.Operations.Scheduled, r.Dups, ld.MaxInFlight, durationOrNone(ld.AttemptTimeout), r.Timeout, ld.MaxRetries)
	o := ld.Operations
	lat := func(l Latency) string {
		return fmt.Sprintf("p50 %s · p90 %s · p99 %s · max %s", fmtDuration(l.P50), fmtDuration(l.P90), fmtDuration(l.P99), fmtDuration(l.Max))
	}
	keys := fmt.Sprintf("%d passed, %d failed, %d inconclusive", r.KeysPassed, r.KeysFailed, r.KeysInconclusive)
	if r.KeysUnproven > 0 {
		keys += fmt.Sprintf(" (%d unproven)", r.KeysUnproven)
	}
	v.Rows = []htmlRow{
		{"operations", fmt.Sprintf("%d started (%d late), %d completed, %d failed, %d not started", o.Started, o.Late, o.Completed, o.Failed, o.NotStarted)},
		{"attempts", fmt.Sprintf("%d (%d retries)", ld.Attempts, r.Retries)},
		{"amplification", fmt.Sprintf("%.2f attempts per operation, peak %.2f in second %d", ld.Amplification, ld.PeakAmplification, ld.PeakSecond)},
		{"goodput", fmt.Sprintf("%.1f operations/s, exactly once %.1f/s (achieved rate %.1f/s, start lag p99 %s)", ld.Goodput,
			ld.ExactlyOnceGoodput, ld.AchievedRate, fmtDuration(ld.StartLag.P99))},
		{"latency", lat(ld.Latency) + " (from the scheduled start)"},
		{"attempt latency", lat(ld.AttemptLatency)},
		{"answers", r.answers()},
		{"keys", keys},
	}
	if s := r.rules(); s != "" {
		v.Rows = append(v.Rows, htmlRow{"rules", s})
	}
	if r.Probe.Enabled {
		v.Rows = append(v.Rows, htmlRow{"late probe", fmt.Sprintf("%d keys probed: %d identical replays, %d ran again, %d replayed differently, %d without a final answer",
			r.Probe.Sent, r.Probe.Identical, r.Probe.Executed, r.Probe.Divergent, r.Probe.NotFinal)})
	}
	for i := range r.Counts {
		v.Rows = append(v.Rows, htmlRow{"side effects", r.Counts[i].String()})
	}
	if len(r.Counts) == 0 {
		v.Note = r.countNote()
	}
	v.Thresholds = r.Thresholds
	v.Failures = append(append([]Failure(nil), r.Failures...), r.Inconclusive...)
	for _, c := range answerClasses {
		v.Legend = append(v.Legend, legendItem{Label: c.Label, Color: c.Color, Name: c.Name})
	}
	v.Charts = []chart{attemptsChart(ld.Timeline), latencyChart(ld.Timeline), amplificationChart(ld.Timeline)}
	r.addIncident(&v)
	return v
}

// niceMax rounds a chart's top up to a round number: 1, 1.5, 2, 2.5, 3, 4,
// 5, 6 or 8 times a power of ten.
func niceMax(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func yTicks(top float64, format func(float64) string) []svgTick {
	var ticks []svgTick
	for i := 0; i <= 4; i++ {
		val := top * float64(i) / 4
		ticks = append(ticks, svgTick{Pos: yOf(val, top), Label: format(val)})
	}
	return ticks
}

func yOf(val, top float64) float64 {
	return padT + (chartH-padT-padB)*(1-val/top)
}

func xTicks(n int) []svgTick {
	step := 1
	for _, s := range []int{1, 2, 5, 10, 15, 30, 60, 120, 300, 600} {
		step = s
		if n/s <= 12 {
			break
		}
	}
	var ticks []svgTick
	for t := 0; t <= n; t += step {
		ticks = append(ticks, svgTick{Pos: xOf(float64(t), n), Label: fmt.Sprintf("%ds", t)})
	}
	return ticks
}

func xOf(t float64, n int) float64 {
	return padL + (chartW-padL-padR)*t/float64(max(n, 1))
}

func attemptsChart(secs []Second) chart {
	c := chart{ID: "attempts", Title: "Attempts per second, by answer", Unit: "attempts"}
	top := 0.0
	for _, s := range secs {
		top = max(top, float64(s.Attempts))
	}
	top = niceMax(top)
	n := len(secs)
	w := (chartW - padL - padR) / float64(max(n, 1))
	for _, s := range secs {
		y := float64(0)
		for _, cl := range answerClasses {
			cnt := cl.count(s)
			if cnt == 0 {
				continue
			}
			y0, y1 := yOf(y, top), yOf(y+float64(cnt), top)
			c.Rects = append(c.Rects, svgRect{X: xOf(float64(s.T), n) + 0.5, Y: y1, W: max(w-1, 0.5), H: y0 - y1,
				Fill: cl.Color, T: s.T, Class: cl.Name, Count: cnt})
			y += float64(cnt)
		}
	}
	c.YTicks = yTicks(top, func(v float64) string { return fmtFloat(math.Round(v*10) / 10) })
	c.XTicks = xTicks(n)
	return c
}

func latencyChart(secs []Second) chart {
	c := chart{ID: "latency", Title: "Operation latency from the scheduled start, p50 and p99 (ms), by the second scheduled", Unit: "ms"}
	top := 0.0
	for _, s := range secs {
		if s.Operations > 0 {
			top = max(top, ms(s.P99))
		}
	}
	top = niceMax(top)
	n := len(secs)
	for _, q := range []struct {
		name, color string
		get         func(Second) time.Duration
	}{{"p50", "#1e88e5", func(s Second) time.Duration { return s.P50 }}, {"p99", "#d81b60", func(s Second) time.Duration { return s.P99 }}} {
		sr := svgSeries{Name: q.name, Color: q.color}
		var path strings.Builder
		for _, s := range secs {
			if s.Operations == 0 {
				continue
			}
			val := ms(q.get(s))
			p := svgPoint{X: xOf(float64(s.T)+0.5, n), Y: yOf(val, top), T: s.T, Value: val, Label: fmt.Sprintf("%s %gms", q.name, val)}
			cmd := "L"
			if path.Len() == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, p.X, p.Y)
			sr.Points = append(sr.Points, p)
		}
		sr.Path = strings.TrimSpace(path.String())
		c.Series = append(c.Series, sr)
	}
	c.YTicks = yTicks(top, func(v float64) string { return fmtFloat(math.Round(v*10)/10) + "ms" })
	c.XTicks = xTicks(n)
	return c
}

func amplificationChart(secs []Second) chart {
	c := chart{ID: "amplification", Title: "Amplification: attempts of the operations scheduled each second, per operation", Unit: "×"}
	top := 1.0
	for _, s := range secs {
		if a, ok := s.Amplification(); ok {
			top = max(top, a)
		}
	}
	top = niceMax(top)
	n := len(secs)
	sr := svgSeries{Name: "amplification", Color: "#3949ab"}
	var path strings.Builder
	for _, s := range secs {
		a, ok := s.Amplification()
		if !ok {
			continue
		}
		a = round3(a)
		p := svgPoint{X: xOf(float64(s.T)+0.5, n), Y: yOf(a, top), T: s.T, Value: a, Label: fmt.Sprintf("%.3g×", a)}
		cmd := "L"
		if path.Len() == 0 {
			cmd = "M"
		}
		fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, p.X, p.Y)
		sr.Points = append(sr.Points, p)
	}
	sr.Path = strings.TrimSpace(path.String())
	c.Series = []svgSeries{sr}
	c.RefY, c.HasRef = yOf(1, top), true
	c.YTicks = yTicks(top, func(v float64) string { return fmtFloat(math.Round(v*100)/100) + "×" })
	c.XTicks = xTicks(n)
	return c
}
