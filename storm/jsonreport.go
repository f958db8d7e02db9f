package storm

import (
	"encoding/json"
	"io"
	"math"
	"time"
)

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

	Started             string              `json:"started"`
	KeysUnproven        int                 `json:"keys_unproven"`
	RetriedServerErrors int                 `json:"retried_server_errors"`
	Rules               []jsonRule          `json:"rules"`
	Counts              map[string]jsonEach `json:"counts,omitempty"`
	Ledger              *jsonLedger         `json:"ledger,omitempty"`

	// load mode only
	Rate             *float64         `json:"rate,omitempty"`
	DurationMS       *float64         `json:"duration_ms,omitempty"`
	Stages           []jsonStage      `json:"stages,omitempty"`
	MaxInFlight      *int             `json:"max_in_flight,omitempty"`
	AttemptTimeoutMS *float64         `json:"attempt_timeout_ms,omitempty"`
	MaxRetries       *int             `json:"max_retries,omitempty"`
	BackoffMS        *jsonBackoff     `json:"backoff_ms,omitempty"`
	Operations       *jsonOperations  `json:"operations,omitempty"`
	Attempts         *int             `json:"attempts,omitempty"`
	Amplification    *float64         `json:"amplification,omitempty"`
	Goodput          *float64         `json:"goodput,omitempty"`
	ExactlyOnce      *float64         `json:"exactly_once_goodput,omitempty"`
	PeakAmp          *jsonPeak        `json:"peak_amplification,omitempty"`
	AchievedRate     *float64         `json:"achieved_rate,omitempty"`
	AttemptLatencyMS *jsonLatency     `json:"attempt_latency_ms,omitempty"`
	StartLagMS       *jsonLatency     `json:"start_lag_ms,omitempty"`
	Thresholds       *[]jsonThreshold `json:"thresholds,omitempty"`
	Timeline         *[]jsonSecond    `json:"timeline,omitempty"`

	// an incident's (incident.go)
	Policy   string        `json:"policy,omitempty"`
	Faults   *[]jsonFault  `json:"faults,omitempty"`
	Events   *[]jsonEvent  `json:"events,omitempty"`
	Recovery *jsonRecovery `json:"recovery,omitempty"`
}

type jsonRule struct {
	Name         string   `json:"name"`
	Failed       int      `json:"failed"`
	Inconclusive int      `json:"inconclusive"`
	Passed       int      `json:"passed"`
	Keys         []string `json:"keys"`
}

// jsonEach is one entry of "counts": a count in operations.
type jsonEach struct {
	Before     int64    `json:"before"`
	After      *int64   `json:"after"`
	Delta      *int64   `json:"delta"`
	Want       int      `json:"want"`
	Operations int      `json:"operations"`
	Each       *float64 `json:"each"`
	Min        int64    `json:"min"`
	Max        int64    `json:"max"`
	OK         bool     `json:"ok"`
	Error      string   `json:"error,omitempty"`
}

type jsonLedger struct {
	Effects      int    `json:"effects"`
	Keys         int    `json:"keys"`
	OtherKeys    int    `json:"other_keys"`
	Malformed    int    `json:"malformed"`
	Disagreement string `json:"disagreement,omitempty"`
}

type jsonPeak struct {
	Value float64 `json:"value"`
	T     int     `json:"t"`
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
	Completed       int      `json:"completed"`
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
	Scheduled       int      `json:"scheduled"`
	Started         int      `json:"started"`
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
	if len(r.Arms) > 0 {
		return r.writeArmsJSON(w)
	}
	return json.NewEncoder(w).Encode(r.jsonOf())
}

// jsonOf returns the JSON form of a report of one arm.
func (r *Report) jsonOf() jsonReport {
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
		KeysPassed:          r.KeysPassed,
		KeysFailed:          r.KeysFailed,
		KeysInconclusive:    r.KeysInconclusive,
		KeysUnproven:        r.KeysUnproven,
		RetriedServerErrors: r.RetriedServerErrors,
		Failures:            orEmpty(r.Failures),
		Inconclusive:        orEmpty(r.Inconclusive),
		Interrupted:         r.Interrupted,
		Error:               r.Error,
		Timeouts:            r.Timeouts,
		ReplayOnly:          r.ReplayOnly,
		CountChecked:        r.Count != nil,
		Mode:                modeBurst,
	}
	if ld := r.Load; ld != nil {
		j.addLoad(r, ld)
	}
	if c := r.Count; c != nil {
		j.Count = &jsonCount{URL: c.URL, Field: c.Field, Before: c.Before, Want: int(c.Min), WantMax: int(c.Max), Error: c.Error}
		if c.Read {
			after, delta := c.After, c.Delta()
			j.Count.After, j.Count.Delta = &after, &delta
		}
	}
	if !r.Started.IsZero() {
		j.Started = r.Started.UTC().Format(time.RFC3339Nano)
	}
	j.Rules = []jsonRule{}
	for _, rr := range r.Rules {
		keys := rr.Keys
		if keys == nil {
			keys = []string{}
		}
		j.Rules = append(j.Rules, jsonRule{Name: rr.Name, Failed: rr.Failed, Inconclusive: rr.Inconclusive, Passed: rr.Passed, Keys: keys})
	}
	for i := range r.Counts {
		c := &r.Counts[i]
		if j.Counts == nil {
			j.Counts = map[string]jsonEach{}
		}
		e := jsonEach{Before: c.Before, Want: c.Want, Operations: c.Operations, Min: c.Min, Max: c.Max, OK: c.OK(), Error: c.Error}
		if c.Read {
			after, delta := c.After, c.Delta()
			e.After, e.Delta = &after, &delta
			if c.Operations > 0 {
				each := round3(float64(delta) / float64(c.Operations))
				e.Each = &each
			}
		}
		j.Counts[c.Field] = e
	}
	if l := r.Ledger; l != nil {
		j.Ledger = &jsonLedger{Effects: l.Effects, Keys: l.Keys, OtherKeys: l.OtherKeys, Malformed: l.Malformed, Disagreement: l.Disagreement}
	}
	j.addIncident(r)
	return j
}

// addLoad fills in load mode's fields.
func (j *jsonReport) addLoad(r *Report, ld *Load) {
	ptr := func(f float64) *float64 { return &f }
	iptr := func(n int) *int { return &n }
	lat := func(l Latency) *jsonLatency {
		return &jsonLatency{P50: ms(l.P50), P90: ms(l.P90), P99: ms(l.P99), Max: ms(l.Max)}
	}
	j.Mode = modeLoad
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
	j.ExactlyOnce = ptr(round3(ld.ExactlyOnceGoodput))
	j.PeakAmp = &jsonPeak{Value: round3(ld.PeakAmplification), T: ld.PeakSecond}
	j.AttemptLatencyMS, j.StartLagMS = lat(ld.AttemptLatency), lat(ld.StartLag)
	ths := []jsonThreshold{}
	for _, t := range r.Thresholds {
		ths = append(ths, jsonThreshold(t))
	}
	j.Thresholds = &ths
	timeline := make([]jsonSecond, 0, len(ld.Timeline))
	for _, s := range ld.Timeline {
		js := jsonSecond{T: s.T, Operations: s.Operations, Completed: s.Completed, Late: s.Late, Attempts: s.Attempts, Originals: s.Originals,
			Replays: s.Replays, InProgress: s.InProgress, RetryLater: s.RetryLater, ServerErrors: s.ServerErrors,
			Timeouts: s.Timeouts, TransportErrors: s.TransportErrors, Scheduled: s.Scheduled, Started: s.Started}
		if a, ok := s.Amplification(); ok {
			js.Amplification = ptr(round3(a))
			js.P50MS, js.P99MS = ptr(ms(s.P50)), ptr(ms(s.P99))
		}
		timeline = append(timeline, js)
	}
	j.Timeline = &timeline
	for _, st := range ld.Stages {
		j.Stages = append(j.Stages, jsonStage{DurationMS: ms(st.Duration), Rate: st.Rate})
	}
}
