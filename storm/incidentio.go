package storm

import (
	"encoding/json"
	"time"
)

// The incident in a history file: the header's "faults" and "events"
// (the schedule) and the end line's (what each did). storm/README.md
// documents them.

type faultJSON struct {
	Hop      string `json:"hop"`
	Kind     string `json:"kind"`
	Window   string `json:"window"`
	AtNS     int64  `json:"at_ns"`
	ForNS    int64  `json:"for_ns"`
	Requests int64  `json:"requests,omitempty"`
	Delayed  int64  `json:"delayed,omitempty"`
	Failed   int64  `json:"failed,omitempty"`
	Refused  int64  `json:"refused,omitempty"`
}

type eventJSON struct {
	AtNS       int64  `json:"at_ns"`
	Command    string `json:"command"`
	Ran        bool   `json:"ran,omitempty"`
	StartedNS  int64  `json:"started_ns,omitempty"`
	DurationNS int64  `json:"duration_ns,omitempty"`
	ExitCode   int    `json:"exit_code"`
	Error      string `json:"error,omitempty"`
	Output     string `json:"output,omitempty"`
}

func faultsJSON(fs []Fault) []faultJSON {
	var out []faultJSON
	for _, f := range fs {
		out = append(out, faultJSON{Hop: f.Hop, Kind: f.Kind, Window: f.Window, AtNS: int64(f.At), ForNS: int64(f.For),
			Requests: f.Requests, Delayed: f.Delayed, Failed: f.Failed, Refused: f.Refused})
	}
	return out
}

func faultsOf(js []faultJSON) []Fault {
	var out []Fault
	for _, f := range js {
		out = append(out, Fault{Hop: f.Hop, Kind: f.Kind, Window: f.Window, At: time.Duration(f.AtNS), For: time.Duration(f.ForNS),
			Requests: f.Requests, Delayed: f.Delayed, Failed: f.Failed, Refused: f.Refused})
	}
	return out
}

func eventsJSON(es []Event) []eventJSON {
	var out []eventJSON
	for _, e := range es {
		out = append(out, eventJSON{AtNS: int64(e.At), Command: e.Command, Ran: e.Ran, StartedNS: int64(e.Started),
			DurationNS: int64(e.Duration), ExitCode: e.ExitCode, Error: e.Error, Output: e.Output})
	}
	return out
}

func eventsOf(js []eventJSON) []Event {
	var out []Event
	for _, e := range js {
		out = append(out, Event{At: time.Duration(e.AtNS), Command: e.Command, Ran: e.Ran, Started: time.Duration(e.StartedNS),
			Duration: time.Duration(e.DurationNS), ExitCode: e.ExitCode, Error: e.Error, Output: e.Output})
	}
	return out
}

// appendIncident appends the end line's "faults" and "events" members,
// when there are any.
func appendIncident(b []byte, fs []Fault, es []Event) []byte {
	if len(fs) > 0 {
		j, err := json.Marshal(faultsJSON(fs))
		if err != nil { // cannot happen: plain fields
			panic(err)
		}
		b = append(append(b, `,"faults":`...), j...)
	}
	if len(es) > 0 {
		j, err := json.Marshal(eventsJSON(es))
		if err != nil { // cannot happen: plain fields
			panic(err)
		}
		b = append(append(b, `,"events":`...), j...)
	}
	return b
}

// The incident in the JSON report.

type jsonFault struct {
	Hop      string  `json:"hop"`
	Kind     string  `json:"kind"`
	Fault    string  `json:"fault"`
	AtS      float64 `json:"at_s"`
	ForS     float64 `json:"for_s"`
	Requests int64   `json:"requests"`
	Delayed  int64   `json:"delayed"`
	Failed   int64   `json:"failed"`
	Refused  int64   `json:"refused"`
}

type jsonEvent struct {
	AtS        float64 `json:"at_s"`
	Command    string  `json:"command"`
	Ran        bool    `json:"ran"`
	StartedS   float64 `json:"started_s"`
	DurationMS float64 `json:"duration_ms"`
	ExitCode   int     `json:"exit_code"`
	Error      string  `json:"error,omitempty"`
	Output     string  `json:"output,omitempty"`
}

type jsonRecovery struct {
	BaselineGoodput float64 `json:"baseline_goodput"`
	BaselineP99MS   float64 `json:"baseline_p99_ms"`
	Seconds         float64 `json:"seconds"`
	Recovered       bool    `json:"recovered"`
	Metastable      bool    `json:"metastable"`
	TriggerStartS   float64 `json:"trigger_start_s"`
	TriggerEndS     float64 `json:"trigger_end_s"`
}

// addIncident fills in the report's policy, faults, events and recovery.
func (j *jsonReport) addIncident(r *Report) {
	j.Policy = r.Policy
	j.Faults, j.Events = jsonFaults(r.Faults), jsonEvents(r.Events)
	if rec := r.Recovery; rec != nil {
		j.Recovery = &jsonRecovery{BaselineGoodput: round3(rec.BaselineGoodput), BaselineP99MS: ms(rec.BaselineP99),
			Seconds: rec.Seconds, Recovered: rec.Recovered, Metastable: rec.Metastable(),
			TriggerStartS: round3(rec.TriggerStart.Seconds()), TriggerEndS: round3(rec.TriggerEnd.Seconds())}
	}
}

func jsonFaults(fs []Fault) *[]jsonFault {
	if len(fs) == 0 {
		return nil
	}
	out := []jsonFault{}
	for _, f := range fs {
		out = append(out, jsonFault{Hop: f.Hop, Kind: f.Kind, Fault: f.Hop + " " + f.Window, AtS: round3(f.At.Seconds()),
			ForS: round3(f.For.Seconds()), Requests: f.Requests, Delayed: f.Delayed, Failed: f.Failed, Refused: f.Refused})
	}
	return &out
}

func jsonEvents(es []Event) *[]jsonEvent {
	if len(es) == 0 {
		return nil
	}
	out := []jsonEvent{}
	for _, e := range es {
		out = append(out, jsonEvent{AtS: round3(e.At.Seconds()), Command: e.Command, Ran: e.Ran, StartedS: round3(e.Started.Seconds()),
			DurationMS: ms(e.Duration), ExitCode: e.ExitCode, Error: e.Error, Output: e.Output})
	}
	return &out
}
