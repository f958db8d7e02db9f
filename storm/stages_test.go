package storm

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stageCounts counts the operations sched puts in each stage, from the
// schedule alone (no clock).
func stageCounts(sched schedule) []int {
	counts := make([]int, len(sched.stages))
	k := 0
	for i := range sched.total() {
		due := sched.due(i)
		for k < len(sched.stages)-1 && due >= sched.starts[k]+sched.stages[k].Duration {
			k++
		}
		counts[k]++
	}
	return counts
}

// Every stage of a ramp schedules the arrivals its rate makes (the area
// under the ramp) within 2 %, a stage that holds a rate schedules it every
// second, and a stage ends on its rate: the gap between its last two
// operations is the inverse of the rate there, within 2 %, and that rate
// is the stage's. A pause schedules nothing.
func TestStagesReachEachRate(t *testing.T) {
	stages, err := ParseStages("4s:100,5s:100,3s:250,4s:50,2s:0,2s:0,3s:80,1s:1000")
	require.NoError(t, err)
	sched := newSchedule(0, 0, stages)
	require.Equal(t, 24*time.Second, sched.duration)

	counts := stageCounts(sched)
	from := 0.0
	prev := time.Duration(-1)
	for i := range sched.total() {
		due := sched.due(i)
		require.GreaterOrEqual(t, due, prev, "operation %d before %d", i, i-1)
		require.Less(t, due, sched.duration, "operation %d after the schedule", i)
		prev = due
	}
	require.Equal(t, time.Duration(0), sched.due(0), "a ramp from 0 starts at once")
	for k, st := range stages {
		want := (from + st.Rate) / 2 * st.Duration.Seconds()
		t.Logf("stage %d %s from %s/s: %d operations scheduled, %.1f wanted", k+1, st, fmtFloat(from), counts[k], want)
		if want == 0 {
			require.Zero(t, counts[k], "stage %d is a pause", k+1)
		} else {
			require.InEpsilon(t, want, float64(counts[k]), 0.02, "stage %d %s", k+1, st)
		}
		if st.Rate > 0 {
			// The stage's last two operations, at its end, are 1/R apart.
			end := sched.starts[k] + st.Duration
			last := 0
			for i := range sched.total() {
				if sched.due(i) < end {
					last = i
				}
			}
			gap := sched.due(last) - sched.due(last-1)
			mid := sched.rateAt(sched.due(last-1) + gap/2)
			require.InEpsilon(t, mid, 1/gap.Seconds(), 0.02, "stage %d %s: the rate at its end", k+1, st)
			require.InDelta(t, st.Rate, sched.rateAt(end-time.Nanosecond), 1e-3)
			require.InEpsilon(t, st.Rate, mid, 0.05, "stage %d %s: the last arrivals are at its end", k+1, st)
		}
		from = st.Rate
	}
	require.Equal(t, int(math.Ceil(sched.arrivals()-1e-9)), sched.total())
	perSecond := map[int]int{}
	for i := range sched.total() {
		perSecond[int(sched.due(i)/time.Second)]++
	}
	for sec := 4; sec < 9; sec++ { // the stage that holds 100/s
		require.Equal(t, 100, perSecond[sec], "second %d", sec)
	}

	// From a rate other than 0, a first stage that holds it is --rate.
	plain, ramp := newSchedule(50, 3*time.Second, nil), newSchedule(50, 0, []Stage{{3 * time.Second, 50}})
	require.Equal(t, plain.total(), ramp.total())
	for i := range plain.total() {
		require.InDelta(t, float64(plain.due(i)), float64(ramp.due(i)), float64(time.Microsecond), "operation %d", i)
	}
	// Leading pauses delay the first operation to the end of the pause.
	paused := newSchedule(0, 0, []Stage{{2 * time.Second, 0}, {time.Second, 10}})
	require.Equal(t, 2*time.Second, paused.due(0))
	require.Equal(t, 5, paused.total())
}

// A storm with stages schedules each second's operations as its stages
// say, the timeline shows them ("scheduled") beside those that started,
// and a history read back judges the same timeline.
func TestStagesRunScheduledPerSecond(t *testing.T) {
	srv, _ := newIdempotentServer(t)
	hist := filepath.Join(t.TempDir(), "h.jsonl")
	code, stdout, stderr := runCommand(t, "--url", srv.URL, "--stages", "1s:40,1s:40,1s:0", "--history", hist, "--json")
	require.Equal(t, 0, code, stderr)
	var j struct {
		Operations struct{ Scheduled, Started int }
		Rate       float64 `json:"rate"`
		DurationMS float64 `json:"duration_ms"`
		Stages     []struct {
			DurationMS float64 `json:"duration_ms"`
			Rate       float64 `json:"rate"`
		} `json:"stages"`
		Timeline []struct {
			T          int `json:"t"`
			Scheduled  int `json:"scheduled"`
			Started    int `json:"started"`
			Operations int `json:"operations"`
		} `json:"timeline"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &j), stdout)
	require.Equal(t, 80, j.Operations.Scheduled) // 20 + 40 + 20
	require.Equal(t, 0.0, j.Rate)
	require.Equal(t, 3000.0, j.DurationMS)
	require.Len(t, j.Stages, 3)
	require.Equal(t, 40.0, j.Stages[1].Rate)
	require.Equal(t, 1000.0, j.Stages[2].DurationMS)
	want := []int{20, 40, 20} // one stage a second
	scheduled, started := 0, 0
	for _, s := range j.Timeline {
		t.Logf("second %d: %d scheduled, %d started", s.T, s.Scheduled, s.Started)
		if s.T < len(want) {
			require.Equal(t, want[s.T], s.Scheduled, "second %d", s.T)
		} else {
			require.Zero(t, s.Scheduled, "second %d", s.T)
		}
		require.Equal(t, s.Operations, s.Scheduled, "second %d: nothing was interrupted", s.T)
		scheduled += s.Scheduled
		started += s.Started
	}
	require.Equal(t, 80, scheduled)
	require.Equal(t, j.Operations.Started, started)

	f, err := os.Open(hist)
	require.NoError(t, err)
	defer f.Close()
	h, err := ReadHistory(f)
	require.NoError(t, err)
	require.Equal(t, []Stage{{time.Second, 40}, {time.Second, 40}, {time.Second, 0}}, h.Header.Settings.Stages)
	rep, err := Check(h)
	require.NoError(t, err)
	var again bytes.Buffer
	require.NoError(t, rep.WriteJSON(&again))
	require.Contains(t, again.String(), `"stages":[{"duration_ms":1000,"rate":40},{"duration_ms":1000,"rate":40},{"duration_ms":1000,"rate":0}]`)
	for i, s := range rep.Load.Timeline {
		require.Equal(t, j.Timeline[i].Scheduled, s.Scheduled)
		require.Equal(t, j.Timeline[i].Started, s.Started)
	}

	code, stdout, stderr = runCommand(t, "--url", srv.URL, "--stages", "1s:10", "--rate", "10")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "load: stages 1s:10 from 10 operations/s (1s) (10 scheduled)")
}

// An interrupted run's timeline still has every operation the schedule
// put in each second, those it never made included.
func TestStagesScheduledCountsOperationsNeverMade(t *testing.T) {
	stages := []Stage{{time.Second, 20}, {time.Second, 20}}
	sched := newSchedule(0, 0, stages)
	h := &History{Header: Header{Version: HistoryVersion, Settings: Settings{
		Mode: modeLoad, Keys: sched.total(), Dups: 1, Timeout: time.Second, Duration: 2 * time.Second, Stages: stages,
	}}, End: &End{Interrupted: true, Elapsed: 500 * time.Millisecond}}
	for i := range 3 { // the pacer made three operations, which sent nothing
		h.Operations = append(h.Operations, Operation{Op: i, Key: newKey(), Scheduled: sched.due(i), Ended: sched.due(i)})
	}
	rep, err := Check(h)
	require.NoError(t, err)
	var got []int
	for _, s := range rep.Load.Timeline {
		got = append(got, s.Scheduled)
	}
	require.Equal(t, []int{10, 20}, got)
	require.Equal(t, 3, rep.Load.Timeline[0].Operations)
}

func TestStagesUsageErrors(t *testing.T) {
	const u = "http://127.0.0.1:1/x"
	for name, args := range map[string][]string{
		"no rate":                {"--url", u, "--stages", "10s"},
		"zero duration":          {"--url", u, "--stages", "0s:10"},
		"negative duration":      {"--url", u, "--stages", "-1s:10"},
		"negative rate":          {"--url", u, "--stages", "1s:-1"},
		"rate not a number":      {"--url", u, "--stages", "1s:abc"},
		"NaN rate":               {"--url", u, "--stages", "1s:NaN"},
		"infinite rate":          {"--url", u, "--stages", "1s:Inf"},
		"bad duration":           {"--url", u, "--stages", "ten:10"},
		"empty":                  {"--url", u, "--stages", ""},
		"empty stage":            {"--url", u, "--stages", "1s:10,"},
		"with duration":          {"--url", u, "--stages", "1s:10", "--duration", "1s"},
		"negative start rate":    {"--url", u, "--stages", "1s:10", "--rate", "-1"},
		"no operation":           {"--url", u, "--stages", "1s:0,2s:0"},
		"too many operations":    {"--url", u, "--stages", "1h:100000"},
		"csv in burst mode":      {"--url", u, "--csv", "x.csv"},
		"metrics in burst mode":  {"--url", u, "--metrics-addr", "127.0.0.1:0"},
		"metrics not loopback":   {"--url", u, "--rate", "10", "--metrics-addr", "0.0.0.0:9464"},
		"metrics on a name":      {"--url", u, "--rate", "10", "--metrics-addr", "example.com:9464"},
		"metrics without a port": {"--url", u, "--rate", "10", "--metrics-addr", "127.0.0.1"},
		"metrics bad port":       {"--url", u, "--rate", "10", "--metrics-addr", "127.0.0.1:http"},
	} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runCommand(t, args...)
			require.Equal(t, 2, code, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, "idemkey storm: ")
		})
	}
	_, _, stderr := runCommand(t, "--url", u, "--stages", "1s:10,2s:x")
	require.Contains(t, stderr, `--stages: stage 2 "2s:x": rate "x" is not a number`)
	_, _, stderr = runCommand(t, "--url", u, "--stages", "1s:10", "--duration", "1s")
	require.Contains(t, stderr, "--stages and --duration are mutually exclusive")

	code, _, stderr := runCommand(t, "-h")
	require.Equal(t, 0, code)
	for _, name := range []string{"-stages", "-csv", "-metrics-addr"} {
		require.Regexp(t, `(?m)^  `+name+`( |$)`, stderr)
	}
	require.Contains(t, stderr, "--stages D:R[,D:R...]")

	for name, cfg := range map[string]Config{
		"stage without duration": {Stages: []Stage{{0, 10}}},
		"stage with NaN":         {Stages: []Stage{{time.Second, math.NaN()}}},
		"duration not the sum":   {Stages: []Stage{{time.Second, 10}}, Duration: 2 * time.Second},
		"too long":               {Stages: []Stage{{math.MaxInt64, 0}, {time.Second, 1}}},
	} {
		t.Run(name, func(t *testing.T) {
			cfg.URL = u
			_, err := Run(t.Context(), cfg)
			require.True(t, errors.Is(err, ErrInvalidConfig), "%v", err)
			require.True(t, strings.Contains(err.Error(), "stage") || strings.Contains(err.Error(), "duration"), "%v", err)
		})
	}
}

// Histories merged from generators with stages have no one schedule: the
// merge keeps none, and each second's scheduled operations are those the
// histories made.
func TestStagesMergedHistories(t *testing.T) {
	stages := []Stage{{time.Second, 10}, {time.Second, 10}}
	sched := newSchedule(0, 0, stages)
	var hs []*History
	for range 2 {
		h := &History{Header: Header{Version: HistoryVersion, Started: time.Unix(1000, 0), Settings: Settings{
			Mode: modeLoad, Keys: sched.total(), Dups: 1, Timeout: time.Second, Duration: 2 * time.Second, Stages: stages,
		}}, End: &End{Elapsed: 2 * time.Second}}
		for i := range sched.total() {
			key := newKey()
			h.Operations = append(h.Operations, Operation{Op: i, Key: key, Scheduled: sched.due(i), Ended: sched.due(i) + time.Millisecond,
				Attempts: []Attempt{{Op: i, Key: key, Attempt: 1, Sent: sched.due(i), Done: sched.due(i) + time.Millisecond,
					Class: ClassOriginal, Status: 201}}})
		}
		hs = append(hs, h)
	}
	m, err := MergeHistories(hs...)
	require.NoError(t, err)
	require.Nil(t, m.Header.Settings.Stages)
	rep, err := Check(m)
	require.NoError(t, err)
	var got []int
	for _, s := range rep.Load.Timeline {
		require.Equal(t, s.Operations, s.Scheduled)
		require.Equal(t, s.Operations, s.Started)
		got = append(got, s.Scheduled)
	}
	require.Equal(t, []int{10, 20}, got) // 5 and 10 from each
	require.InDelta(t, 15.0, rep.Load.AchievedRate, 1e-9, "30 operations over the 2 s schedule")
}
