package storm

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// The incident in the HTML report: the fault windows and the events shaded
// on every chart, and with several arms, one colour per arm on every chart
// and the arms side by side in a table.

// svgShade is a fault window or an event across a chart.
type svgShade struct {
	X, W  float64
	Kind  string // "fault" or "event"
	Label string
	Fill  string
}

// Shade colours: a fault window, an event.
const (
	faultShade = "#ffcdd2"
	eventShade = "#b3e5fc"
)

// armColors are the arms' colours, in their order.
var armColors = []string{"#d81b60", "#1e88e5", "#43a047", "#fb8c00", "#8e24aa"}

// shades returns the windows and events across a chart of n seconds.
func shades(faults []Fault, events []Event, n int) []svgShade {
	var out []svgShade
	x := func(d time.Duration) float64 { return xOf(min(d.Seconds(), float64(n)), n) }
	for _, f := range faults {
		x0 := x(f.At)
		out = append(out, svgShade{X: x0, W: max(x(f.End())-x0, 2), Kind: "fault", Label: f.Hop + " " + f.Window, Fill: faultShade})
	}
	for _, e := range events {
		start, end := e.At, e.end()
		if e.Ran {
			start = e.Started
		}
		x0 := x(start)
		out = append(out, svgShade{X: x0, W: max(x(end)-x0, 3), Kind: "event", Label: "at " + e.At.String() + ": " + e.Command, Fill: eventShade})
	}
	return out
}

// addIncident adds a one-arm report's incident to its page: the rows and
// the shades on every chart.
func (r *Report) addIncident(v *htmlView) {
	if r.Policy != "" {
		v.Setup += ", retry policy " + r.Policy
	}
	var b strings.Builder
	writeIncident(&b, r.Faults, r.Events, true)
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if label, val, ok := strings.Cut(strings.TrimSpace(line), ": "); ok {
			v.Rows = append(v.Rows, htmlRow{label, val})
		}
	}
	if rec := r.Recovery; rec != nil {
		v.Rows = append(v.Rows, htmlRow{"recovery", rec.String()})
	}
	if len(r.Faults)+len(r.Events) > 0 {
		v.ShadeLegend = shadeLegend(r.Faults, r.Events)
		for i := range v.Charts {
			v.Charts[i].Shades = shades(r.Faults, r.Events, len(r.Load.Timeline))
		}
	}
}

func shadeLegend(faults []Fault, events []Event) []legendItem {
	var out []legendItem
	if len(faults) > 0 {
		out = append(out, legendItem{Label: "fault window", Color: faultShade, Name: "fault"})
	}
	if len(events) > 0 {
		out = append(out, legendItem{Label: "command (--at)", Color: eventShade, Name: "event"})
	}
	return out
}

// armsView is the page of a report of several arms: the arms table, and
// charts with a line per arm.
func (r *Report) armsView() htmlView {
	v := htmlView{
		Title:   "idemkey storm: " + r.Method + " " + r.URL,
		Target:  r.Method + " " + r.URL,
		Started: r.Started.UTC().Format(time.RFC3339),
	}
	switch r.Verdict() {
	case VerdictPass:
		v.Verdict, v.VerdictCSS = "PASS", "pass"
		v.Why = "every arm passed"
	case VerdictFail:
		v.Verdict, v.VerdictCSS = "FAIL", "fail"
		v.Why = "an arm failed"
	default:
		v.Verdict, v.VerdictCSS = "INCONCLUSIVE", "inconclusive"
		v.Why = "an arm was inconclusive"
	}
	if len(r.BrokenThresholds()) > 0 {
		v.Why += "; thresholds broken"
	}
	var names []string
	n := 0
	for _, a := range r.Arms {
		names = append(names, a.Policy)
		if a.Load != nil {
			n = max(n, len(a.Load.Timeline))
		}
	}
	first := r.Arms[0]
	if ld := first.Load; ld != nil {
		v.Setup = fmt.Sprintf("%s operations/s for %s (%d scheduled) × %d dups per arm, arms %s, one after the other on the same schedule",
			fmtFloat(ld.Rate), ld.Duration, ld.Operations.Scheduled, r.Dups, strings.Join(names, ", "))
	}
	var b strings.Builder
	writeIncident(&b, r.Faults, r.Events, false)
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if label, val, ok := strings.Cut(strings.TrimSpace(line), ": "); ok {
			v.Rows = append(v.Rows, htmlRow{label, val})
		}
	}
	v.ArmsHead = append([]string{"policy"}, names...)
	for _, row := range armRows {
		hr := htmlArmRow{Label: row.label}
		for _, a := range r.Arms {
			val := "-"
			if a.Load != nil {
				val = row.value(a)
			}
			hr.Cells = append(hr.Cells, val)
		}
		v.ArmsRows = append(v.ArmsRows, hr)
	}
	for i, a := range r.Arms {
		v.ArmLegend = append(v.ArmLegend, legendItem{Label: a.Policy, Color: armColors[i%len(armColors)], Name: a.Policy})
		for _, t := range a.Thresholds {
			t.Name = a.Policy + ": " + t.Name
			v.Thresholds = append(v.Thresholds, t)
		}
	}
	v.ShadeLegend = shadeLegend(r.Faults, r.Events)
	v.Charts = []chart{
		r.armsChart("goodput", "Goodput: operations completed, by the second scheduled", n, func(s Second) (float64, bool) {
			return float64(s.Completed), s.Operations > 0
		}, func(v float64) string { return fmtFloat(math.Round(v*10) / 10) }),
		r.armsChart("attempts", "Attempts per second", n, func(s Second) (float64, bool) {
			return float64(s.Attempts), true
		}, func(v float64) string { return fmtFloat(math.Round(v*10) / 10) }),
		r.armsChart("latency", "Operation latency p99 from the scheduled start (ms), by the second scheduled", n, func(s Second) (float64, bool) {
			return ms(s.P99), s.Operations > 0
		}, func(v float64) string { return fmtFloat(math.Round(v*10)/10) + "ms" }),
		r.armsChart("amplification", "Amplification: attempts sent per operation scheduled, each second", n, func(s Second) (float64, bool) {
			a, ok := s.Amplification()
			return round3(a), ok
		}, func(v float64) string { return fmtFloat(math.Round(v*100)/100) + "×" }),
	}
	v.Charts[3].RefY, v.Charts[3].HasRef = yOf(1, v.Charts[3].top), true
	for i := range v.Charts {
		v.Charts[i].Shades = shades(r.Faults, r.Events, n)
	}
	return v
}

// armsChart draws a line per arm of the figure get of every second.
func (r *Report) armsChart(id, title string, n int, get func(Second) (float64, bool), format func(float64) string) chart {
	c := chart{ID: id, Title: title}
	top := 0.0
	if id == "amplification" {
		top = 1
	}
	for _, a := range r.Arms {
		if a.Load == nil {
			continue
		}
		for _, s := range a.Load.Timeline {
			if val, ok := get(s); ok {
				top = max(top, val)
			}
		}
	}
	top = niceMax(top)
	c.top = top
	for i, a := range r.Arms {
		sr := svgSeries{Name: a.Policy, Color: armColors[i%len(armColors)]}
		var path strings.Builder
		if a.Load != nil {
			for _, s := range a.Load.Timeline {
				val, ok := get(s)
				if !ok {
					continue
				}
				p := svgPoint{X: xOf(float64(s.T)+0.5, n), Y: yOf(val, top), T: s.T, Value: val, Label: a.Policy + " " + format(val)}
				cmd := "L"
				if path.Len() == 0 {
					cmd = "M"
				}
				fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, p.X, p.Y)
				sr.Points = append(sr.Points, p)
			}
		}
		sr.Path = strings.TrimSpace(path.String())
		c.Series = append(c.Series, sr)
	}
	c.YTicks = yTicks(top, format)
	c.XTicks = xTicks(n)
	return c
}

// htmlArmRow is one row of the arms table.
type htmlArmRow struct {
	Label string
	Cells []string
}
