package storm

import (
	"encoding/json"
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
	var b strings.Builder
	row := func(label, format string, args ...any) {
		fmt.Fprintf(&b, "%-14s %s\n", label, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(&b, "idemkey storm: %s %s\n", r.Method, r.URL)
	if ld := r.Load; ld != nil {
		fmt.Fprintf(&b, "  load: %s operations/s for %s (%d scheduled) x %d dups, max in flight %d, attempt timeout %s, timeout %s, retries %d, backoff %s,%s, probe %s",
			fmtFloat(ld.Rate), ld.Duration, ld.Operations.Scheduled, r.Dups, ld.MaxInFlight, durationOrNone(ld.AttemptTimeout),
			r.Timeout, ld.MaxRetries, orDefault(ld.BaseDelay, "100ms"), orDefault(ld.MaxDelay, "10s"), onOff(r.Probe.Enabled))
	} else {
		fmt.Fprintf(&b, "  %d keys x %d dups, concurrency %d, timeout %s, retry %s, probe %s",
			r.Keys, r.Dups, r.Concurrency, r.Timeout, onOff(r.Retry), onOff(r.Probe.Enabled))
	}
	if r.KeyHeader != "" && r.KeyHeader != headerIdempotencyKey {
		fmt.Fprintf(&b, ", key header %s", r.KeyHeader)
	}
	b.WriteString("\n\n")
	lat := func(l Latency) string {
		return fmt.Sprintf("p50 %s  p90 %s  p99 %s  max %s", fmtDuration(l.P50), fmtDuration(l.P90), fmtDuration(l.P99), fmtDuration(l.Max))
	}
	if ld := r.Load; ld != nil {
		o := ld.Operations
		row("operations", "%d started (%d late), %d completed, %d failed, %d not started", o.Started, o.Late, o.Completed, o.Failed, o.NotStarted)
		row("attempts", "%d (%d retries), amplification %.2f", ld.Attempts, r.Retries, ld.Amplification)
		row("goodput", "%.1f operations/s (achieved rate %.1f/s, start lag p99 %s)", ld.Goodput, ld.AchievedRate, fmtDuration(ld.StartLag.P99))
		row("elapsed", "%s", fmtDuration(r.Elapsed))
		row("latency", "%s (operations, from the scheduled start)", lat(ld.Latency))
		row("attempt lat.", "%s", lat(ld.AttemptLatency))
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
	row("originals", "%d", r.Originals)
	if r.OversizeReplays > 0 {
		row("replays", "%d (%d response-too-large)", r.Replays, r.OversizeReplays)
	} else {
		row("replays", "%d", r.Replays)
	}
	row("in progress", "%d (409 without %s)", r.InProgress, headerReplayed)
	row("retry later", "%d (408, 425, 429, 503 without %s)", r.RetryLater, headerReplayed)
	if r.Timeouts > 0 {
		row("errors", "%d (transport %d, of which %d timeouts; 5xx %d)", r.Errors, r.TransportErrors, r.Timeouts, r.ServerErrors)
	} else {
		row("errors", "%d (transport %d, 5xx %d)", r.Errors, r.TransportErrors, r.ServerErrors)
	}
	if r.Probe.Enabled {
		row("late probe", "%d keys probed: %d identical replays, %d ran again, %d replayed differently, %d without a final answer",
			r.Probe.Sent, r.Probe.Identical, r.Probe.Executed, r.Probe.Divergent, r.Probe.NotFinal)
	}
	if c := r.Count; c != nil {
		switch {
		case !c.Read && c.Error != "":
			row("count", "%s: %d before, unreadable after: %s", c.Field, c.Before, c.Error)
		case !c.Read:
			row("count", "%s: %d before, not read after", c.Field, c.Before)
		default:
			cmp := "="
			if r.KeysInconclusive > 0 {
				cmp = "within"
			}
			if r.countMismatch() {
				cmp = "!="
				if r.KeysInconclusive > 0 {
					cmp = "outside"
				}
			}
			row("count", "%s: %d before, %d after: delta %d %s %s", c.Field, c.Before, c.After, c.Delta(), cmp, r.countWant())
		}
	}
	if r.Count == nil && (r.Load != nil || r.ReplayOnly > 0) {
		row("count", "%s", r.countNote())
	}
	row("keys", "%d passed, %d failed, %d inconclusive", r.KeysPassed, r.KeysFailed, r.KeysInconclusive)
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
		var why []string
		if r.KeysFailed > 0 {
			why = append(why, fmt.Sprintf("%d of %d keys failed", r.KeysFailed, r.Keys))
		}
		if r.countMismatch() {
			why = append(why, fmt.Sprintf("%s grew by %d for %s", r.Count.Field, r.Count.Delta(), r.countWant()))
		}
		fmt.Fprintf(&b, "FAIL (%s)\n", strings.Join(why, "; "))
	default:
		var why []string
		switch {
		case r.Error != "":
			why = append(why, r.Error)
		case r.Interrupted:
			why = append(why, "interrupted")
		}
		if r.KeysInconclusive > 0 && r.Error == "" {
			why = append(why, fmt.Sprintf("%d of %d keys inconclusive", r.KeysInconclusive, r.Keys))
		}
		if r.Count != nil && !r.Count.Read && !r.Interrupted {
			why = append(why, "count unreadable after the storm")
		}
		fmt.Fprintf(&b, "INCONCLUSIVE (%s)\n", strings.Join(why, "; "))
	}
	if broken := r.BrokenThresholds(); len(broken) > 0 {
		var parts []string
		for _, th := range broken {
			parts = append(parts, th.String())
		}
		fmt.Fprintf(&b, "thresholds: BROKEN (%s)\n", strings.Join(parts, "; "))
	}
	if r.Load != nil && len(r.Load.Timeline) > 0 {
		b.WriteString("\ntimeline (attempts by the second they were sent; operations and latency by the second they were scheduled)\n")
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

// countNote says what a storm without a side-effect count could not
// prove.
func (r *Report) countNote() string {
	if r.ReplayOnly == 0 {
		return "not checked (no --count-url): the answers show every key ran at most once; only a side-effect count proves it"
	}
	return fmt.Sprintf("not checked (no --count-url): %d keys passed on replays alone (their original's answer was lost to a timeout or an error); only a side-effect count proves they ran once", r.ReplayOnly)
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
		fmt.Fprintf(b, "  %s  %s\n", f.Key, f.Reason)
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

// jsonReport is the stable JSON form of a Report.
type jsonReport struct {
	Verdict          string      `json:"verdict"`
	URL              string      `json:"url"`
	Method           string      `json:"method"`
	KeyHeader        string      `json:"key_header"`
	Keys             int         `json:"keys"`
	Dups             int         `json:"dups"`
	Concurrency      int         `json:"concurrency"`
	TimeoutMS        float64     `json:"timeout_ms"`
	Retry            bool        `json:"retry"`
	Requests         int         `json:"requests"`
	Responses        int         `json:"responses"`
	Retries          int         `json:"retries"`
	ElapsedMS        float64     `json:"elapsed_ms"`
	ThroughputRPS    float64     `json:"throughput_rps"`
	LatencyMS        jsonLatency `json:"latency_ms"`
	StatusCounts     map[int]int `json:"status_counts"`
	Originals        int         `json:"originals"`
	Replays          int         `json:"replays"`
	OversizeReplays  int         `json:"oversize_replays"`
	InProgress       int         `json:"in_progress"`
	RetryLater       int         `json:"retry_later"`
	Errors           int         `json:"errors"`
	TransportErrors  int         `json:"transport_errors"`
	ServerErrors     int         `json:"server_errors"`
	Probe            jsonProbe   `json:"probe"`
	Count            *jsonCount  `json:"count,omitempty"`
	KeysPassed       int         `json:"keys_passed"`
	KeysFailed       int         `json:"keys_failed"`
	KeysInconclusive int         `json:"keys_inconclusive"`
	Failures         []Failure   `json:"failures"`
	Inconclusive     []Failure   `json:"inconclusive"`
	Timeouts         int         `json:"timeouts"`
	ReplayOnly       int         `json:"replay_only"`
	CountChecked     bool        `json:"count_checked"`
	Interrupted      bool        `json:"interrupted"`
	Error            string      `json:"error,omitempty"`
	Mode             string      `json:"mode"`

	// load mode only
	Rate             *float64         `json:"rate,omitempty"`
	DurationMS       *float64         `json:"duration_ms,omitempty"`
	MaxInFlight      *int             `json:"max_in_flight,omitempty"`
	AttemptTimeoutMS *float64         `json:"attempt_timeout_ms,omitempty"`
	MaxRetries       *int             `json:"max_retries,omitempty"`
	BackoffMS        *jsonBackoff     `json:"backoff_ms,omitempty"`
	Operations       *jsonOperations  `json:"operations,omitempty"`
	Attempts         *int             `json:"attempts,omitempty"`
	Amplification    *float64         `json:"amplification,omitempty"`
	Goodput          *float64         `json:"goodput,omitempty"`
	AchievedRate     *float64         `json:"achieved_rate,omitempty"`
	AttemptLatencyMS *jsonLatency     `json:"attempt_latency_ms,omitempty"`
	StartLagMS       *jsonLatency     `json:"start_lag_ms,omitempty"`
	Thresholds       *[]jsonThreshold `json:"thresholds,omitempty"`
	Timeline         *[]jsonSecond    `json:"timeline,omitempty"`
}

type jsonBackoff struct {
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

type jsonOperations struct {
	Scheduled  int `json:"scheduled"`
	Started    int `json:"started"`
	Completed  int `json:"completed"`
	Failed     int `json:"failed"`
	Late       int `json:"late"`
	NotStarted int `json:"not_started"`
}

type jsonThreshold struct {
	Name  string  `json:"name"`
	Limit float64 `json:"limit"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit,omitempty"`
	OK    bool    `json:"ok"`
}

type jsonSecond struct {
	T               int      `json:"t"`
	Operations      int      `json:"operations"`
	Late            int      `json:"late"`
	Attempts        int      `json:"attempts"`
	Amplification   *float64 `json:"amplification"`
	Originals       int      `json:"originals"`
	Replays         int      `json:"replays"`
	InProgress      int      `json:"in_progress"`
	RetryLater      int      `json:"retry_later"`
	ServerErrors    int      `json:"server_errors"`
	Timeouts        int      `json:"timeouts"`
	TransportErrors int      `json:"transport_errors"`
	P50MS           *float64 `json:"p50_ms"`
	P99MS           *float64 `json:"p99_ms"`
}

type jsonLatency struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

type jsonProbe struct {
	Enabled   bool    `json:"enabled"`
	Sent      int     `json:"sent"`
	Identical int     `json:"identical"`
	Executed  int     `json:"executed"`
	Divergent int     `json:"divergent"`
	NotFinal  int     `json:"not_final"`
	Retries   int     `json:"retries"`
	ElapsedMS float64 `json:"elapsed_ms"`
}

type jsonCount struct {
	URL     string `json:"url"`
	Field   string `json:"field"`
	Before  int64  `json:"before"`
	After   *int64 `json:"after"`
	Delta   *int64 `json:"delta"`
	Want    int    `json:"want"`
	WantMax int    `json:"want_max"`
	Error   string `json:"error,omitempty"`
}

// WriteJSON writes the report to w as one JSON object on one line. Field
// names are stable snake_case; durations are in milliseconds and
// status_counts is keyed by the status code as a string. count is present
// only with a count URL; its after and delta are null when the count was
// not read after the storm.
func (r *Report) WriteJSON(w io.Writer) error {
	orEmpty := func(f []Failure) []Failure {
		if f == nil {
			return []Failure{}
		}
		return f
	}
	counts := r.StatusCounts
	if counts == nil {
		counts = map[int]int{}
	}
	j := jsonReport{
		Verdict:       r.Verdict(),
		URL:           r.URL,
		Method:        r.Method,
		KeyHeader:     r.KeyHeader,
		Keys:          r.Keys,
		Dups:          r.Dups,
		Concurrency:   r.Concurrency,
		TimeoutMS:     ms(r.Timeout),
		Retry:         r.Retry,
		Requests:      r.Requests,
		Responses:     r.Responses,
		Retries:       r.Retries,
		ElapsedMS:     ms(r.Elapsed),
		ThroughputRPS: math.Round(r.Throughput()*10) / 10,
		LatencyMS: jsonLatency{
			P50: ms(r.Latency.P50), P90: ms(r.Latency.P90), P99: ms(r.Latency.P99), Max: ms(r.Latency.Max),
		},
		StatusCounts:    counts,
		Originals:       r.Originals,
		Replays:         r.Replays,
		OversizeReplays: r.OversizeReplays,
		InProgress:      r.InProgress,
		RetryLater:      r.RetryLater,
		Errors:          r.Errors,
		TransportErrors: r.TransportErrors,
		ServerErrors:    r.ServerErrors,
		Probe: jsonProbe{
			Enabled: r.Probe.Enabled, Sent: r.Probe.Sent, Identical: r.Probe.Identical, Executed: r.Probe.Executed,
			Divergent: r.Probe.Divergent, NotFinal: r.Probe.NotFinal, Retries: r.Probe.Retries, ElapsedMS: ms(r.Probe.Elapsed),
		},
		KeysPassed:       r.KeysPassed,
		KeysFailed:       r.KeysFailed,
		KeysInconclusive: r.KeysInconclusive,
		Failures:         orEmpty(r.Failures),
		Inconclusive:     orEmpty(r.Inconclusive),
		Interrupted:      r.Interrupted,
		Error:            r.Error,
		Timeouts:         r.Timeouts,
		ReplayOnly:       r.ReplayOnly,
		CountChecked:     r.Count != nil,
		Mode:             "burst",
	}
	if ld := r.Load; ld != nil {
		j.addLoad(r, ld)
	}
	if c := r.Count; c != nil {
		j.Count = &jsonCount{URL: c.URL, Field: c.Field, Before: c.Before, Want: r.KeysPassed, WantMax: r.KeysPassed + r.KeysInconclusive, Error: c.Error}
		if c.Read {
			after, delta := c.After, c.Delta()
			j.Count.After, j.Count.Delta = &after, &delta
		}
	}
	return json.NewEncoder(w).Encode(j)
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

// addLoad fills in load mode's fields.
func (j *jsonReport) addLoad(r *Report, ld *Load) {
	ptr := func(f float64) *float64 { return &f }
	iptr := func(n int) *int { return &n }
	lat := func(l Latency) *jsonLatency {
		return &jsonLatency{P50: ms(l.P50), P90: ms(l.P90), P99: ms(l.P99), Max: ms(l.Max)}
	}
	j.Mode = "load"
	j.Rate, j.DurationMS, j.MaxInFlight = ptr(ld.Rate), ptr(ms(ld.Duration)), iptr(ld.MaxInFlight)
	j.AttemptTimeoutMS, j.MaxRetries = ptr(ms(ld.AttemptTimeout)), iptr(ld.MaxRetries)
	j.BackoffMS = &jsonBackoff{Min: ms(ld.BaseDelay), Max: ms(ld.MaxDelay)}
	if ld.BaseDelay == 0 {
		j.BackoffMS.Min = 100
	}
	if ld.MaxDelay == 0 {
		j.BackoffMS.Max = 10000
	}
	o := ld.Operations
	j.Operations = &jsonOperations{Scheduled: o.Scheduled, Started: o.Started, Completed: o.Completed, Failed: o.Failed, Late: o.Late, NotStarted: o.NotStarted}
	j.Attempts = iptr(ld.Attempts)
	j.Amplification, j.Goodput, j.AchievedRate = ptr(round3(ld.Amplification)), ptr(round3(ld.Goodput)), ptr(round3(ld.AchievedRate))
	j.AttemptLatencyMS, j.StartLagMS = lat(ld.AttemptLatency), lat(ld.StartLag)
	ths := []jsonThreshold{}
	for _, t := range r.Thresholds {
		ths = append(ths, jsonThreshold(t))
	}
	j.Thresholds = &ths
	timeline := make([]jsonSecond, 0, len(ld.Timeline))
	for _, s := range ld.Timeline {
		js := jsonSecond{T: s.T, Operations: s.Operations, Late: s.Late, Attempts: s.Attempts, Originals: s.Originals,
			Replays: s.Replays, InProgress: s.InProgress, RetryLater: s.RetryLater, ServerErrors: s.ServerErrors,
			Timeouts: s.Timeouts, TransportErrors: s.TransportErrors}
		if a, ok := s.Amplification(); ok {
			js.Amplification = ptr(round3(a))
			js.P50MS, js.P99MS = ptr(ms(s.P50)), ptr(ms(s.P99))
		}
		timeline = append(timeline, js)
	}
	j.Timeline = &timeline
}
