package storm

import (
	"fmt"
	"strings"
	"time"
)

// startProgress starts the progress line writer, if any, and returns the
// function that stops it and clears the line.
func (r *runner) startProgress(start time.Time) func() {
	w := r.cfg.Progress
	if w == nil {
		return func() {}
	}
	total := r.cfg.Keys * r.cfg.Dups
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		width := 0
		for {
			select {
			case <-done:
				if width > 0 {
					fmt.Fprintf(w, "\r%s\r", strings.Repeat(" ", width))
				}
				return
			case now := <-t.C:
				secs := now.Sub(start).Seconds()
				n := r.attempts.Load()
				line := fmt.Sprintf("storm: %d/%d requests done, %d in flight, %d retries, %.0f req/s, %.1fs",
					r.completed.Load(), total, r.inFlight.Load(), r.retries.Load(), float64(n)/secs, secs)
				if r.probing.Load() {
					line = fmt.Sprintf("storm: late probe, %d/%d keys done, %d in flight, %.1fs",
						r.probed.Load(), r.cfg.Keys, r.inFlight.Load(), secs)
				}
				pad := ""
				if len(line) < width {
					pad = strings.Repeat(" ", width-len(line))
				}
				width = max(width, len(line))
				fmt.Fprintf(w, "\r%s%s", line, pad)
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}
