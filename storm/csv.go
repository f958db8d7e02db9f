package storm

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// csvColumns are the columns of the CSV timeline (Report.WriteCSV,
// --csv), in order; storm/README.md documents each.
var csvColumns = []string{
	"arm", "t", "scheduled", "started", "operations", "late", "attempts", "amplification",
	"originals", "replays", "in_progress", "retry_later", "server_errors", "timeouts", "transport_errors",
	"p50_ms", "p99_ms",
}

// errNoTimeline is WriteCSV's error for a report of the burst mode.
var errNoTimeline = errors.New("storm: the CSV timeline is load mode's: this report has none")

// WriteCSV writes load mode's timeline to w as CSV: a header row (arm, t,
// scheduled, started, operations, late, attempts, amplification, the
// attempts by class, p50_ms, p99_ms), then one row per second of the run,
// as the JSON report's "timeline" has them. The arm column names the
// retry policy of each arm of a run of several (Report.Arms, their rows
// one arm after the other); it is empty for a run of one arm.
// Amplification and the latency percentiles are empty for a second in
// which no operation was scheduled. It returns an error for a report
// without a timeline (the burst mode's) and the first write error.
func (r *Report) WriteCSV(w io.Writer) error {
	if r.Load == nil && len(r.Arms) == 0 {
		return errNoTimeline
	}
	cw := csv.NewWriter(w)
	if err := cw.Write(csvColumns); err != nil {
		return err
	}
	if r.Load != nil {
		if err := writeCSVTimeline(cw, "", r.Load.Timeline); err != nil {
			return err
		}
	}
	for _, arm := range r.Arms {
		if arm.Load == nil {
			continue
		}
		if err := writeCSVTimeline(cw, arm.Policy, arm.Load.Timeline); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// writeCSVTimeline writes one row per second of timeline, each with arm in
// the first column: the rows of one arm of a run.
func writeCSVTimeline(cw *csv.Writer, arm string, timeline []Second) error {
	row := make([]string, 0, len(csvColumns))
	itoa := strconv.Itoa
	for _, s := range timeline {
		row = append(row[:0], arm, itoa(s.T), itoa(s.Scheduled), itoa(s.Started), itoa(s.Operations), itoa(s.Late),
			itoa(s.Attempts))
		amp, p50, p99 := "", "", ""
		if a, ok := s.Amplification(); ok {
			amp = fmtCSVFloat(round3(a))
			p50, p99 = fmtCSVFloat(ms(s.P50)), fmtCSVFloat(ms(s.P99))
		}
		row = append(row, amp, itoa(s.Originals), itoa(s.Replays), itoa(s.InProgress), itoa(s.RetryLater),
			itoa(s.ServerErrors), itoa(s.Timeouts), itoa(s.TransportErrors), p50, p99)
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	return nil
}

func fmtCSVFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// writeCSVFile writes the CSV timeline to the file at path.
func (r *Report) writeCSVFile(path string) error {
	if r.Load == nil && len(r.Arms) == 0 {
		return errNoTimeline
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := r.WriteCSV(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}
