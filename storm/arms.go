package storm

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Arms: with several retry policies (Config.RetryPolicies), each runs the
// same schedule in turn, and the report puts them side by side.

// combineArms returns the report of several arms: the target, the
// schedule and the arms, whose worst verdict is its own.
func combineArms(arms []*Report) *Report {
	first := arms[0]
	rep := &Report{URL: first.URL, Started: first.Started, Method: first.Method, KeyHeader: first.KeyHeader,
		Keys: first.Keys, Dups: first.Dups, Timeout: first.Timeout, Arms: arms, StatusCounts: map[int]int{}}
	for _, f := range first.Faults {
		rep.Faults = append(rep.Faults, Fault{Hop: f.Hop, Kind: f.Kind, Window: f.Window, At: f.At, For: f.For})
	}
	for _, e := range first.Events {
		rep.Events = append(rep.Events, Event{At: e.At, Command: e.Command, ExitCode: -1})
	}
	for _, a := range arms {
		rep.Requests += a.Requests
		rep.Responses += a.Responses
		rep.Elapsed += a.Elapsed
		rep.Interrupted = rep.Interrupted || a.Interrupted
	}
	return rep
}

// armsVerdict is the worst of the arms' verdicts.
func (r *Report) armsVerdict() string {
	v := VerdictPass
	for _, a := range r.Arms {
		switch a.Verdict() {
		case VerdictFail:
			return VerdictFail
		case VerdictInconclusive:
			v = VerdictInconclusive
		}
	}
	return v
}

// jsonArms is the JSON form of a report of several arms.
type jsonArms struct {
	Verdict     string          `json:"verdict"`
	URL         string          `json:"url"`
	Method      string          `json:"method"`
	Mode        string          `json:"mode"`
	Started     string          `json:"started,omitempty"`
	Policies    []string        `json:"policies"`
	Faults      *[]jsonFault    `json:"faults,omitempty"`
	Events      *[]jsonEvent    `json:"events,omitempty"`
	Interrupted bool            `json:"interrupted"`
	Arms        []jsonReport    `json:"arms"`
	Thresholds  []jsonBroken    `json:"broken_thresholds"`
	Recovered   map[string]bool `json:"recovered,omitempty"`
}

// jsonBroken is a threshold an arm broke.
type jsonBroken struct {
	Policy string `json:"policy"`
	jsonThreshold
}

func (r *Report) writeArmsJSON(w io.Writer) error {
	j := jsonArms{Verdict: r.Verdict(), URL: r.URL, Method: r.Method, Mode: modeLoad, Policies: []string{},
		Faults: jsonFaults(r.Faults), Events: jsonEvents(r.Events), Interrupted: r.Interrupted, Thresholds: []jsonBroken{}}
	if !r.Started.IsZero() {
		j.Started = r.Started.UTC().Format(time.RFC3339Nano)
	}
	for _, a := range r.Arms {
		j.Policies = append(j.Policies, a.Policy)
		j.Arms = append(j.Arms, a.jsonOf())
		for _, t := range a.BrokenThresholds() {
			j.Thresholds = append(j.Thresholds, jsonBroken{Policy: a.Policy, jsonThreshold: jsonThreshold(t)})
		}
		if a.Recovery != nil {
			if j.Recovered == nil {
				j.Recovered = map[string]bool{}
			}
			j.Recovered[a.Policy] = a.Recovery.Recovered
		}
	}
	return json.NewEncoder(w).Encode(j)
}

// armRow is one figure of the arms table: its label and its value in
// an arm's report.
type armRow struct {
	label string
	value func(r *Report) string
}

var armRows = []armRow{
	{"verdict", func(r *Report) string { return r.Verdict() }},
	{"operations", func(r *Report) string { return fmt.Sprint(r.Load.Operations.Scheduled) }},
	{"completed", func(r *Report) string { return fmt.Sprint(r.Load.Operations.Completed) }},
	{"failed", func(r *Report) string { return fmt.Sprint(r.Load.Operations.Failed) }},
	{"attempts", func(r *Report) string { return fmt.Sprint(r.Load.Attempts) }},
	{"amplification", func(r *Report) string { return fmt.Sprintf("%.2f", r.Load.Amplification) }},
	{"peak amp.", func(r *Report) string {
		return fmt.Sprintf("%.2f (s%d)", r.Load.PeakAmplification, r.Load.PeakSecond)
	}},
	{"goodput", func(r *Report) string { return fmt.Sprintf("%.1f/s", r.Load.Goodput) }},
	{"exactly once", func(r *Report) string { return fmt.Sprintf("%.1f/s", r.Load.ExactlyOnceGoodput) }},
	{"p50", func(r *Report) string { return fmtDuration(r.Load.Latency.P50) }},
	{"p99", func(r *Report) string { return fmtDuration(r.Load.Latency.P99) }},
	{"timeouts", func(r *Report) string { return fmt.Sprint(r.Timeouts) }},
	{"recovery", func(r *Report) string { return recoveryCell(r.Recovery) }},
}

// recoveryCell renders a recovery in a few words.
func recoveryCell(rec *Recovery) string {
	switch {
	case rec == nil:
		return "-"
	case rec.Recovered:
		return fmt.Sprintf("%ss", fmtFloat(rec.Seconds))
	default:
		return fmt.Sprintf("METASTABLE (not in %ss)", fmtFloat(rec.Seconds))
	}
}

// writeArmsTable writes the arms side by side: a column per arm.
func writeArmsTable(b *strings.Builder, arms []*Report) {
	cells := [][]string{{"policy"}}
	for _, a := range arms {
		cells[0] = append(cells[0], a.Policy)
	}
	for _, row := range armRows {
		line := []string{row.label}
		for _, a := range arms {
			if a.Load == nil {
				line = append(line, "-")
				continue
			}
			line = append(line, row.value(a))
		}
		cells = append(cells, line)
	}
	widths := make([]int, len(cells[0]))
	for _, line := range cells {
		for i, c := range line {
			widths[i] = max(widths[i], len(c))
		}
	}
	for _, line := range cells {
		for i, c := range line {
			if i == 0 {
				fmt.Fprintf(b, "  %-*s", widths[i], c)
			} else {
				fmt.Fprintf(b, "  %*s", widths[i], c)
			}
		}
		b.WriteString("\n")
	}
}

// writeArmsText writes the report of several arms: the schedule, the
// arms side by side, then each arm's report.
func (r *Report) writeArmsText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "idemkey storm: %s %s, %d retry policies as arms, each on the same schedule\n", r.Method, r.URL, len(r.Arms))
	writeIncident(&b, r.Faults, r.Events, false)
	b.WriteString("\narms\n")
	writeArmsTable(&b, r.Arms)
	fmt.Fprintf(&b, "\nverdict: %s (the worst of the arms')\n", strings.ToUpper(r.Verdict()))
	if broken := r.BrokenThresholds(); len(broken) > 0 {
		var parts []string
		for _, th := range broken {
			parts = append(parts, th.String())
		}
		fmt.Fprintf(&b, "thresholds: BROKEN (%s)\n", strings.Join(parts, "; "))
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	for _, a := range r.Arms {
		if _, err := fmt.Fprintf(w, "\n== arm %s ==\n", a.Policy); err != nil {
			return err
		}
		if err := a.WriteText(w); err != nil {
			return err
		}
	}
	return nil
}

// writeIncident writes the faults and events of a report, with what each
// did when done.
func writeIncident(b *strings.Builder, faults []Fault, events []Event, done bool) {
	for _, f := range faults {
		fmt.Fprintf(b, "  fault: %s %s", f.Hop, f.Window)
		if done {
			fmt.Fprintf(b, ": %d requests, %d delayed, %d failed, %d refused", f.Requests, f.Delayed, f.Failed, f.Refused)
		}
		b.WriteString("\n")
	}
	for _, e := range events {
		fmt.Fprintf(b, "  event: at %s: %s", e.At, e.Command)
		switch {
		case !done:
		case !e.Ran:
			fmt.Fprintf(b, ": %s", e.Error)
		case e.Error != "":
			fmt.Fprintf(b, ": started at %s, ran %s, %s", fmtDuration(e.Started), fmtDuration(e.Duration), e.Error)
		default:
			fmt.Fprintf(b, ": started at %s, ran %s, exit 0", fmtDuration(e.Started), fmtDuration(e.Duration))
		}
		b.WriteString("\n")
	}
}
