package storm

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// WriteText writes a human-readable report to w.
func (r *Report) WriteText(w io.Writer) error {
	if len(r.Arms) > 0 {
		return r.writeArmsText(w)
	}
	var b strings.Builder
	row := func(label, format string, args ...any) {
		fmt.Fprintf(&b, "%-14s %s\n", label, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(&b, "idemkey storm: %s %s\n", r.Method, r.URL)
	if ld := r.Load; ld != nil {
		fmt.Fprintf(&b, "  load: %s (%d scheduled) x %d dups, max in flight %d, attempt timeout %s, timeout %s, retries %d, backoff %s,%s, probe %s",
			loadShape(ld.Rate, ld.Duration, ld.Stages), ld.Operations.Scheduled, r.Dups, ld.MaxInFlight, durationOrNone(ld.AttemptTimeout),
			r.Timeout, ld.MaxRetries, orDefault(ld.BaseDelay, "100ms"), orDefault(ld.MaxDelay, "10s"), onOff(r.Probe.Enabled))
	} else {
		fmt.Fprintf(&b, "  %d keys x %d dups, concurrency %d, timeout %s, retry %s, probe %s",
			r.Keys, r.Dups, r.Concurrency, r.Timeout, onOff(r.Retry), onOff(r.Probe.Enabled))
	}
	if r.KeyHeader != "" && r.KeyHeader != headerIdempotencyKey {
		fmt.Fprintf(&b, ", key header %s", r.KeyHeader)
	}
	if r.Policy != "" {
		fmt.Fprintf(&b, ", retry policy %s", r.Policy)
	}
	b.WriteString("\n")
	writeIncident(&b, r.Faults, r.Events, true)
	b.WriteString("\n")
	lat := func(l Latency) string {
		return fmt.Sprintf("p50 %s  p90 %s  p99 %s  max %s", fmtDuration(l.P50), fmtDuration(l.P90), fmtDuration(l.P99), fmtDuration(l.Max))
	}
	if ld := r.Load; ld != nil {
		o := ld.Operations
		row("operations", "%d started (%d late), %d completed, %d failed, %d not started", o.Started, o.Late, o.Completed, o.Failed, o.NotStarted)
		row("attempts", "%d (%d retries), amplification %.2f, peak %.2f in second %d", ld.Attempts, r.Retries, ld.Amplification,
			ld.PeakAmplification, ld.PeakSecond)
		row("goodput", "%.1f operations/s, exactly once %.1f/s (achieved rate %.1f/s, start lag p99 %s)", ld.Goodput,
			ld.ExactlyOnceGoodput, ld.AchievedRate, fmtDuration(ld.StartLag.P99))
		row("elapsed", "%s", fmtDuration(r.Elapsed))
		row("latency", "%s (operations, from the scheduled start)", lat(ld.Latency))
		row("attempt lat.", "%s", lat(ld.AttemptLatency))
		if rec := r.Recovery; rec != nil {
			row("recovery", "%s", rec.String())
		}
	} else {
		row("requests", "%d (%d responses, %d retries)", r.Requests, r.Responses, r.Retries)
		row("elapsed", "%s", fmtDuration(r.Elapsed))
		row("throughput", "%.1f req/s", r.Throughput())
		row("latency", "%s", lat(r.Latency))
	}
	var statuses []string
	for _, code := range slices.Sorted(maps.Keys(r.StatusCounts)) {
		statuses = append(statuses, fmt.Sprintf("%d: %d", code, r.StatusCounts[code]))
	}
	if len(statuses) == 0 {
		statuses = []string{"none"}
	}
	row("status codes", "%s", strings.Join(statuses, "  "))
	// The answers as the timeline and the HTML report partition them.
	row("originals", "%d", r.Originals-r.ServerErrors)
	if r.OversizeReplays > 0 {
		row("replays", "%d (%d response-too-large)", r.Replays, r.OversizeReplays)
	} else {
		row("replays", "%d", r.Replays)
	}
	row("in progress", "%d (409 without %s)", r.InProgress, headerReplayed)
	row("retry later", "%d (408, 425, 429, 503 without %s)", r.RetryLater, headerReplayed)
	errs := fmt.Sprintf("%d: %d timeouts, %d transport errors, %d 5xx", r.Errors, r.Timeouts, r.TransportErrors-r.Timeouts, r.ServerErrors)
	if r.RetriedServerErrors > 0 {
		errs += fmt.Sprintf(" (%d retried by storm: not executions)", r.RetriedServerErrors)
	}
	row("errors", "%s", errs)
	if r.Probe.Enabled {
		row("late probe", "%d keys probed: %d identical replays, %d ran again, %d replayed differently, %d without a final answer",
			r.Probe.Sent, r.Probe.Identical, r.Probe.Executed, r.Probe.Divergent, r.Probe.NotFinal)
	}
	for i := range r.Counts {
		row("count", "%s", r.Counts[i].String())
	}
	if len(r.Counts) == 0 && (r.Load != nil || r.ReplayOnly > 0 || r.KeysUnproven > 0) {
		row("count", "%s", r.countNote())
	}
	if l := r.Ledger; l != nil {
		s := fmt.Sprintf("%d side effects for %d keys (%d of them not the history's)", l.Effects, l.Keys, l.OtherKeys)
		if l.Malformed > 0 {
			s += fmt.Sprintf(", %d malformed", l.Malformed)
		}
		row("ledger", "%s", s)
	}
	keys := fmt.Sprintf("%d passed, %d failed, %d inconclusive", r.KeysPassed, r.KeysFailed, r.KeysInconclusive)
	if r.KeysUnproven > 0 {
		keys += fmt.Sprintf(" (%d unproven)", r.KeysUnproven)
	}
	row("keys", "%s", keys)
	if s := r.rules(); s != "" {
		row("rules", "%s", s)
	}
	if len(r.Thresholds) > 0 {
		var parts []string
		for _, th := range r.Thresholds {
			s := th.String()
			if !th.OK {
				s += " BROKEN"
			}
			parts = append(parts, s)
		}
		row("thresholds", "%s", strings.Join(parts, "; "))
	}
	writeKeys(&b, "failed", r.Failures, r.KeysFailed)
	writeKeys(&b, "inconclusive", r.Inconclusive, r.KeysInconclusive)

	b.WriteString("\nverdict: ")
	switch r.Verdict() {
	case VerdictPass:
		b.WriteString("PASS\n")
	case VerdictFail:
		fmt.Fprintf(&b, "FAIL (%s)\n", strings.Join(r.failWhy(), "; "))
	default:
		fmt.Fprintf(&b, "INCONCLUSIVE (%s)\n", strings.Join(r.inconclusiveWhy(), "; "))
	}
	if broken := r.BrokenThresholds(); len(broken) > 0 {
		var parts []string
		for _, th := range broken {
			parts = append(parts, th.String())
		}
		fmt.Fprintf(&b, "thresholds: BROKEN (%s)\n", strings.Join(parts, "; "))
	}
	if r.Load != nil && len(r.Load.Timeline) > 0 {
		b.WriteString("\ntimeline (attempts by the second they were sent; operations, amplification and latency by the second they were scheduled)\n")
		writeTimeline(&b, r.Load.Timeline)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeTimeline writes the per-second table.
func writeTimeline(b *strings.Builder, secs []Second) {
	const format = "%4s %6s %5s %8s %6s %7s %7s %5s %6s %5s %8s %6s %9s %9s\n"
	fmt.Fprintf(b, format, "t", "ops", "late", "attempts", "amp", "orig", "replay", "409", "later", "5xx", "timeout", "error", "p50", "p99")
	for _, s := range secs {
		amp := "-"
		if a, ok := s.Amplification(); ok {
			amp = fmt.Sprintf("%.2f", a)
		}
		p50, p99 := "-", "-"
		if s.Operations > 0 {
			p50, p99 = fmtDuration(s.P50), fmtDuration(s.P99)
		}
		fmt.Fprintf(b, format, strconv.Itoa(s.T), strconv.Itoa(s.Operations), strconv.Itoa(s.Late), strconv.Itoa(s.Attempts), amp,
			strconv.Itoa(s.Originals), strconv.Itoa(s.Replays), strconv.Itoa(s.InProgress), strconv.Itoa(s.RetryLater),
			strconv.Itoa(s.ServerErrors), strconv.Itoa(s.Timeouts), strconv.Itoa(s.TransportErrors), p50, p99)
	}
}

func durationOrNone(d time.Duration) string {
	if d <= 0 {
		return "none"
	}
	return d.String()
}

func orDefault(d time.Duration, def string) string {
	if d <= 0 {
		return def
	}
	return d.String()
}

// writeKeys lists the keys of one class with what each got.
func writeKeys(b *strings.Builder, class string, keys []Failure, total int) {
	if len(keys) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s keys (showing %d of %d):\n", class, len(keys), total)
	for _, f := range keys {
		fmt.Fprintf(b, "  %s  [%s] %s\n", f.Key, f.Rule, f.Reason)
		got := describeStatuses(f.Statuses, f.TransportErrors)
		if f.Probe != "" {
			got += "; late probe: " + f.Probe
		}
		fmt.Fprintf(b, "      got %s\n", got)
	}
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// ms converts d to milliseconds rounded to the microsecond.
func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}

// fmtDuration renders d compactly with a precision suited to its size.
func fmtDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64) + "µs"
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
	default:
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
	}
}
