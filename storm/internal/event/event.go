// Package event runs storm's --at commands: a shell command at a time of
// the run (kill an instance, "redis-cli DEBUG SLEEP 5", flip a feature
// flag), with when it started, how long it ran, its exit status and the
// end of its output recorded for the report.
//
//	cmd, err := event.Parse("20s=redis-cli -p 6379 DEBUG SLEEP 5")
//	r := event.Start(start, []event.Command{cmd}, event.Options{}) // start: the run's
//	... run the storm ...
//	results := r.Stop(ctx) // waits for running commands until ctx is done, then kills them
//
// Commands run with "/bin/sh -c" (cmd /C on Windows), each in a process
// group of its own on Unix so that ending it ends what it started. A
// command whose time has not come when the runner stops is not run; one
// still running is waited for until the context given to Stop is done,
// then killed.
package event

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// defaultOutputLimit is the default Options.OutputLimit.
const defaultOutputLimit = 4 << 10

// waitDelay bounds the wait for a killed command's output pipes, which a
// process it started in the background may hold open.
const waitDelay = time.Second

// Command is one --at: a shell command and when to run it.
type Command struct {
	// At is when to run it, from the run's start.
	At time.Duration
	// Command is the shell command line.
	Command string
}

// String returns the command as --at writes it: D=COMMAND.
func (c Command) String() string { return c.At.String() + "=" + c.Command }

// Parse parses the value of --at: D=COMMAND, D a Go duration from the
// run's start ("20s", "1m30s") and COMMAND a shell command line. It returns
// an error that quotes the value and says what is wrong with it.
func Parse(s string) (Command, error) {
	d, cmd, ok := strings.Cut(s, "=")
	if !ok {
		return Command{}, fmt.Errorf("--at %q: want D=COMMAND, such as 20s='redis-cli DEBUG SLEEP 5'", s)
	}
	d, cmd = strings.TrimSpace(d), strings.TrimSpace(cmd)
	at, err := time.ParseDuration(d)
	switch {
	case err != nil:
		return Command{}, fmt.Errorf("--at %q: %q is not a duration such as 20s or 1m30s", s, d)
	case at < 0:
		return Command{}, fmt.Errorf("--at %q: the time must not be negative", s)
	case cmd == "":
		return Command{}, fmt.Errorf("--at %q: the command is empty", s)
	}
	return Command{At: at, Command: cmd}, nil
}

// Result is what one command did.
type Result struct {
	Command
	// Ran reports that the command was started; false when the runner
	// stopped before its time, or it could not start (Err says why).
	Ran bool
	// Started is when its process started, from the run's start.
	Started time.Duration
	// Duration is how long it ran, until its exit (or until it was
	// killed).
	Duration time.Duration
	// ExitCode is its exit status; -1 if it did not run to an exit (not
	// started, killed, ended by a signal).
	ExitCode int
	// Err says why it did not exit 0: "exit status 3", "killed: the run
	// ended", the error starting it, or "not run: the run ended first".
	// "" for success.
	Err string
	// Output is the end of what it wrote to stdout and stderr together,
	// at most Options.OutputLimit bytes.
	Output string
}

// Options configures a Runner; the zero value gives the defaults.
type Options struct {
	// OutputLimit bounds the output kept per command: its last bytes.
	// Default: 4 KiB.
	OutputLimit int
	// Dir is the commands' working directory. Default: the process's.
	Dir string
	// OnEnd, if set, is called once per command that ran, as it ends
	// (from the goroutine that waited for it), so that the run can record
	// it as it happens. Default: nil.
	OnEnd func(Result)
}

// Runner runs commands at their times. Its methods are safe for
// concurrent use.
type Runner struct {
	start time.Time
	o     Options
	kill  context.Context // cancelled to kill the running commands
	cut   context.CancelFunc

	mu      sync.Mutex
	stopped bool
	results []Result
	timers  []*time.Timer
	wg      sync.WaitGroup
}

// Start schedules each command at start+At (start being the run's start;
// a time already past runs at once) and returns the Runner. Stop ends it.
func Start(start time.Time, cmds []Command, o Options) *Runner {
	if o.OutputLimit <= 0 {
		o.OutputLimit = defaultOutputLimit
	}
	r := &Runner{start: start, o: o, results: make([]Result, len(cmds)), timers: make([]*time.Timer, len(cmds))}
	r.kill, r.cut = context.WithCancel(context.Background())
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, c := range cmds {
		r.results[i] = Result{Command: c, ExitCode: -1}
		r.wg.Add(1)
		r.timers[i] = time.AfterFunc(time.Until(start.Add(c.At)), func() {
			defer r.wg.Done()
			r.run(i)
		})
	}
	return r
}

// run runs command i, unless the runner has stopped.
func (r *Runner) run(i int) {
	r.mu.Lock()
	if r.stopped {
		r.results[i].Err = "not run: the run ended first"
		r.mu.Unlock()
		return
	}
	res := &r.results[i]
	out := &tail{limit: r.o.OutputLimit}
	cmd := shell(r.kill, res.Command.Command)
	cmd.Dir = r.o.Dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = waitDelay
	err := cmd.Start()
	began := time.Now()
	res.Started = began.Sub(r.start)
	if err != nil {
		res.Err = err.Error()
		r.mu.Unlock()
		return
	}
	res.Ran = true
	r.mu.Unlock()

	err = cmd.Wait()

	r.mu.Lock()
	res.Duration = time.Since(began)
	res.Output = out.String()
	res.ExitCode = cmd.ProcessState.ExitCode()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case r.kill.Err() != nil:
		res.Err = "killed: the run ended"
	case errors.As(err, &exit):
		res.Err = exit.Error()
	default:
		res.Err = err.Error()
	}
	done := *res
	r.mu.Unlock()
	if r.o.OnEnd != nil {
		r.o.OnEnd(done)
	}
}

// Results returns every command's Result as it stands now, in the order
// of their times (commands with the same time in the order given).
func (r *Runner) Results() []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.results)
	slices.SortStableFunc(out, func(a, b Result) int { return cmp.Compare(a.At, b.At) })
	return out
}

// Stop ends the runner: commands whose time has not come are not run
// (their Err says so); commands still running are waited for until ctx is
// done, then killed with what they started. It returns every command's
// Result, as Results does. Later calls return the same.
func (r *Runner) Stop(ctx context.Context) []Result {
	r.mu.Lock()
	if !r.stopped {
		r.stopped = true
		for i, t := range r.timers {
			if t.Stop() {
				r.wg.Done() // it will never run
				r.results[i].Err = "not run: the run ended first"
			}
		}
	}
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		r.cut()
		<-done
	}
	r.cut()
	return r.Results()
}

// tail keeps the last limit bytes written to it.
type tail struct {
	mu    sync.Mutex
	limit int
	buf   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.limit {
		t.buf = append(t.buf[:0], p[len(p)-t.limit:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.limit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
