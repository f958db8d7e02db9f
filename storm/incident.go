package storm

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/idemkey/idemkey/idemclient"
	"github.com/idemkey/idemkey/storm/internal/event"
	"github.com/idemkey/idemkey/storm/internal/hop"
)

// An incident, reproduced: fault hops (Config.Proxies, TCPProxies) that
// disturb what the service under test calls on a schedule (Config.Faults),
// commands at a time of the run (Config.At), retry policies run as arms
// (Config.RetryPolicies), and the recovery after the last trigger
// (Report.Recovery). See "Reproduce an incident" in storm/README.md.

// eventStopWait bounds the wait, once an arm's storm has ended, for its
// commands still running before they are killed.
const eventStopWait = 5 * time.Second

// Recovery thresholds: after the last trigger, the run has recovered
// once recoverySeconds consecutive seconds have a goodput of at least
// recoveryGoodput of the baseline's and a p99 under recoveryP99 times the
// baseline's.
const (
	recoveryGoodput = 0.95
	recoveryP99     = 2
	recoverySeconds = 3
)

// Fault is one window of a fault hop's schedule (Config.Faults) and, once
// the run has ended, what it did.
type Fault struct {
	// Hop is the name of the hop, Kind its kind: "http" (--proxy) or
	// "tcp" (--tcp-proxy).
	Hop  string
	Kind string
	// Window is the window as --fault writes it, without the hop's name:
	// "at=5s for=10s latency=200ms".
	Window string
	// At is when the window opened, For how long it stayed open, from the
	// run's start.
	At, For time.Duration
	// Requests counts the requests (TCP: the client's writes) that met
	// the window open; Delayed those held for its latency; Failed those
	// answered with its error status; Refused the connections reset.
	Requests, Delayed, Failed, Refused int64
}

// End returns when the window closed, from the run's start.
func (f Fault) End() time.Duration { return f.At + f.For }

// Event is one command of Config.At and, once the run has ended, what it
// did.
type Event struct {
	// At is when it was due, from the run's start; Command the shell
	// command line.
	At      time.Duration
	Command string
	// Ran reports that it started; Started is when, from the run's start,
	// and Duration how long it ran.
	Ran      bool
	Started  time.Duration
	Duration time.Duration
	// ExitCode is its exit status; -1 if it did not run to an exit.
	ExitCode int
	// Error says why it did not exit 0 ("exit status 3", "not run: the
	// run ended first"); "" for success.
	Error string
	// Output is the end of what it wrote (stdout and stderr together).
	Output string
}

// end returns when the event's effect ended, from the run's start: the
// end of the command, or its time if it did not run.
func (e Event) end() time.Duration {
	if e.Ran {
		return e.Started + e.Duration
	}
	return e.At
}

// Recovery is how the run came back after its triggers (faults and
// events): the baseline measured before the first one, and the time from
// the end of the last one until goodput was back to at least 95 % of the
// baseline's and the p99 under twice the baseline's, for 3 consecutive
// seconds. Seconds are the timeline's (operations by the second they were
// scheduled).
type Recovery struct {
	// TriggerStart is when the first trigger began, TriggerEnd when the
	// last one ended, from the run's start.
	TriggerStart, TriggerEnd time.Duration
	// BaselineGoodput is the operations completed per second over the
	// whole seconds before the first trigger, and BaselineP99 the p99
	// latency of those of their operations that ended before it (one
	// still going when it began met it).
	BaselineGoodput float64
	BaselineP99     time.Duration
	// Recovered reports that the run recovered before its schedule
	// ended; a run that did not is metastable: it stayed degraded after
	// its trigger was gone.
	Recovered bool
	// Seconds is the time from TriggerEnd to the first of the recovered
	// seconds; when not Recovered, to the end of the schedule.
	Seconds float64
}

// Metastable reports that the run did not recover after its triggers.
func (r *Recovery) Metastable() bool { return !r.Recovered }

// armHooks is what Run gives each arm's runArm: its policy, the schedule
// for the history's header, and the calls that start and end the
// incident's schedule on the arm's clock.
type armHooks struct {
	policy string
	faults []Fault
	events []Event
	begin  func(start time.Time)
	finish func() ([]Fault, []Event)
}

// incident is the parsed incident of a Config.
type incident struct {
	specs    []hop.Spec
	faults   []hop.Fault
	cmds     []event.Command
	policies []string
}

// triggers reports whether the incident has faults or events.
func (inc *incident) triggers() bool { return len(inc.faults) > 0 || len(inc.cmds) > 0 }

// parseIncident parses and checks cfg's incident; cfg is normalized. The
// errors wrap ErrInvalidConfig.
func parseIncident(cfg Config) (*incident, error) {
	bad := func(format string, a ...any) (*incident, error) {
		return nil, fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	inc := &incident{}
	kinds := map[string]hop.Kind{}
	for _, list := range []struct {
		specs []string
		parse func(string) (hop.Spec, error)
	}{{cfg.Proxies, hop.ParseProxy}, {cfg.TCPProxies, hop.ParseTCPProxy}} {
		for _, s := range list.specs {
			spec, err := list.parse(s)
			if err != nil {
				return bad("%v", err)
			}
			if _, dup := kinds[spec.Name]; dup {
				return bad("two hops are named %s: give each --proxy and --tcp-proxy a name of its own", spec.Name)
			}
			kinds[spec.Name] = spec.Kind
			inc.specs = append(inc.specs, spec)
		}
	}
	for _, s := range cfg.Faults {
		f, err := hop.ParseFault(s)
		if err != nil {
			return bad("%v", err)
		}
		if _, ok := kinds[f.Hop]; !ok {
			return bad("--fault %q: no --proxy or --tcp-proxy is named %s", s, f.Hop)
		}
		if cfg.loadMode() && f.End() > cfg.Duration {
			return bad("--fault %q: the window ends at %s, past the run's end (--duration %s)", s, f.End(), cfg.Duration)
		}
		inc.faults = append(inc.faults, f)
	}
	for _, s := range cfg.At {
		c, err := event.Parse(s)
		if err != nil {
			return bad("%v", err)
		}
		if cfg.loadMode() && c.At >= cfg.Duration {
			return bad("--at %q: %s is past the run's end (--duration %s)", s, c.At, cfg.Duration)
		}
		inc.cmds = append(inc.cmds, c)
	}
	slices.SortStableFunc(inc.faults, func(a, b hop.Fault) int { return cmp.Compare(a.At, b.At) })
	slices.SortStableFunc(inc.cmds, func(a, b event.Command) int { return cmp.Compare(a.At, b.At) })
	seen := map[string]bool{}
	for _, p := range cfg.RetryPolicies {
		if !cfg.loadMode() {
			return bad("retry policies are load mode's: give a rate or a duration")
		}
		if _, err := idemclient.NewRetryPolicy(p, idemclient.RetryOptions{}); err != nil {
			return bad("retry policy %q: want one of %s", p, strings.Join(idemclient.RetryPolicyNames(), ", "))
		}
		if seen[p] {
			return bad("retry policy %s given twice", p)
		}
		seen[p] = true
		inc.policies = append(inc.policies, p)
	}
	if len(inc.policies) == 0 && cfg.loadMode() {
		inc.policies = []string{idemclient.RetryBackoff}
	}
	if cfg.MaxRecovery > 0 && (!inc.triggers() || !cfg.loadMode()) {
		return bad("a maximum recovery needs load mode and a trigger (a fault or a command at a time)")
	}
	if cfg.MaxRecovery > 0 {
		first := time.Duration(math.MaxInt64)
		for _, f := range inc.faults {
			first = min(first, f.At)
		}
		for _, c := range inc.cmds {
			first = min(first, c.At)
		}
		if first < time.Second {
			return bad("a maximum recovery needs a baseline: the first trigger (at %s) must leave a whole second before it", first)
		}
	}
	if cfg.History != nil && len(inc.policies) > 1 {
		return bad("History takes one arm's history: with several retry policies, give HistoryFor")
	}
	return inc, nil
}

// Run executes the storm described by cfg: the counts read (with
// CountURL), the storm, the late probe (unless NoProbe) and the second
// read, and returns its report: Check's verdict over the history the storm
// recorded, which Config.History receives as the storm goes. With fault
// hops (Config.Proxies, TCPProxies), they listen before the counts are
// read and are closed when Run returns; their windows (Config.Faults) and
// the commands (Config.At) count from the storm's start. With several
// Config.RetryPolicies, each runs as an arm of its own, in the order
// given, with the same schedule from its own start and on fresh keys:
// the Report returned then has one Report per arm in Arms, and its
// verdict is the worst of theirs.
//
// It returns an error wrapping ErrInvalidConfig, and no report, when cfg
// is invalid or a hop cannot listen, and an error wrapping ErrCount, and
// no report, when CountURL cannot be read before the storm. When ctx is
// cancelled before the storm completes, Run stops sending, abandons the
// requests in flight (recorded as transport errors whose Error is
// "interrupted": they were sent, and may have run) and returns the
// partial report, marked Interrupted, together with ctx.Err(); the probe,
// the second count read and the arms not run yet are skipped then. When
// Config.History cannot be written, Run still runs the storm and returns
// its report, with an error wrapping ErrHistory. Run is safe for
// concurrent use with distinct Configs.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	ncfg, _, err := normalize(cfg)
	if err != nil {
		return nil, err
	}
	inc, err := parseIncident(ncfg)
	if err != nil {
		return nil, err
	}
	if len(inc.specs) == 0 && !inc.triggers() && len(inc.policies) <= 1 {
		if len(inc.policies) == 1 {
			cfg.arm.policy = inc.policies[0]
		}
		return runArm(ctx, cfg)
	}
	var hops *hop.Set
	if len(inc.specs) > 0 {
		if hops, err = hop.Open(inc.specs, inc.faults, hop.Options{}); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
		}
		defer hops.Close()
		if cfg.OnHop != nil {
			for _, h := range hops.Hops() {
				cfg.OnHop(h.Name(), h.Addr())
			}
		}
	}
	kinds := map[string]string{}
	for _, s := range inc.specs {
		kinds[s.Name] = string(s.Kind)
	}
	var schedule []Fault
	for _, f := range inc.faults {
		schedule = append(schedule, faultOf(hop.Record{Hop: f.Hop, Kind: hop.Kind(kinds[f.Hop]), Window: f.Window}))
	}
	var planned []Event
	for _, c := range inc.cmds {
		planned = append(planned, Event{At: c.At, Command: c.Command, ExitCode: -1})
	}
	policies := inc.policies
	if len(policies) == 0 {
		policies = []string{""} // the burst mode's
	}
	var arms []*Report
	for i, p := range policies {
		if i > 0 && !pause(ctx, armGap) {
			break
		}
		acfg := cfg
		var runner *event.Runner
		acfg.arm = armHooks{policy: p, faults: schedule, events: planned,
			begin: func(start time.Time) {
				if hops != nil {
					hops.Begin(start)
				}
				if len(inc.cmds) > 0 {
					runner = event.Start(start, inc.cmds, event.Options{})
				}
			},
			finish: func() ([]Fault, []Event) {
				var fs []Fault
				var es []Event
				if hops != nil {
					for _, rec := range hops.Records() {
						fs = append(fs, faultOf(rec))
					}
				}
				if runner != nil {
					sctx, cancel := context.WithTimeout(context.Background(), eventStopWait)
					for _, res := range runner.Stop(sctx) {
						es = append(es, eventOf(res))
					}
					cancel()
				}
				return fs, es
			}}
		if len(policies) > 1 {
			acfg.History = nil
			if cfg.HistoryFor != nil {
				acfg.History = cfg.HistoryFor(p)
			}
		}
		rep, err := runArm(ctx, acfg)
		if rep == nil {
			if len(arms) == 0 {
				return nil, err
			}
			return combineArms(arms), err
		}
		arms = append(arms, rep)
		if err != nil {
			if len(arms) == 1 {
				return rep, err
			}
			return combineArms(arms), err
		}
	}
	if len(arms) == 1 {
		return arms[0], ctx.Err()
	}
	return combineArms(arms), ctx.Err()
}

// armGap is the pause between two arms, for what the first left in flight
// on its way through the service to end before the next starts.
const armGap = time.Second

// pause waits d, or until ctx is done; it reports whether ctx is not done.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// faultOf converts a hop's record.
func faultOf(r hop.Record) Fault {
	return Fault{Hop: r.Hop, Kind: string(r.Kind), Window: r.Window.String(), At: r.Window.At, For: r.Window.For,
		Requests: r.Requests, Delayed: r.Delayed, Failed: r.Failed, Refused: r.Refused}
}

// eventOf converts a command's result.
func eventOf(r event.Result) Event {
	return Event{At: r.At, Command: r.Command.Command, Ran: r.Ran, Started: r.Started, Duration: r.Duration,
		ExitCode: r.ExitCode, Error: r.Err, Output: r.Output}
}

// incident fills in the report's policy, faults and events from the
// history, and measures the recovery; rep.Load is in.
func (c *checker) incident() {
	h, rep := c.h, c.rep
	rep.Policy = h.Header.Settings.Policy
	rep.Faults, rep.Events = h.Header.Faults, h.Header.Events
	if h.End != nil {
		if h.End.Faults != nil {
			rep.Faults = h.End.Faults
		}
		if h.End.Events != nil {
			rep.Events = h.End.Events
		}
	}
	if rep.Load != nil {
		rep.Recovery = c.recovery()
	}
}

// recovery measures Report.Recovery from the timeline (Report.Load's,
// with its Completed counts); nil without a trigger, or without a whole
// second before the first one to take the baseline from.
func (c *checker) recovery() *Recovery {
	rep := c.rep
	if len(rep.Faults) == 0 && len(rep.Events) == 0 {
		return nil
	}
	first, last := time.Duration(math.MaxInt64), time.Duration(0)
	for _, f := range rep.Faults {
		first, last = min(first, f.At), max(last, f.End())
	}
	for _, e := range rep.Events {
		first, last = min(first, e.At), max(last, e.end())
	}
	base := int(first / time.Second) // whole seconds before the first trigger
	if base < 1 {
		return nil
	}
	rec := &Recovery{TriggerStart: first, TriggerEnd: last}
	secs := rep.Load.Timeline
	var baseLat []time.Duration
	for i := range c.h.Operations {
		op := &c.h.Operations[i]
		if op.Scheduled >= time.Duration(base)*time.Second {
			continue
		}
		switch {
		case len(op.Attempts) == 0 || op.Ended == 0:
			baseLat = append(baseLat, c.s.Timeout)
		case op.Ended <= first: // one still going when the trigger began met it: not the baseline's
			baseLat = append(baseLat, op.Ended-op.Scheduled)
		}
	}
	completed := 0
	for t := 0; t < base && t < len(secs); t++ {
		completed += secs[t].Completed
	}
	rec.BaselineGoodput = float64(completed) / float64(base)
	rec.BaselineP99 = percentiles(baseLat).P99
	good := func(s Second) bool {
		return float64(s.Completed) >= recoveryGoodput*rec.BaselineGoodput && s.P99 < recoveryP99*rec.BaselineP99
	}
	whole := int(c.s.Duration / time.Second) // the schedule's whole seconds
	from := int((last + time.Second - 1) / time.Second)
	for t := from; t+recoverySeconds <= whole && t+recoverySeconds <= len(secs); t++ {
		ok := true
		for k := range recoverySeconds {
			ok = ok && good(secs[t+k])
		}
		if ok {
			rec.Recovered = true
			rec.Seconds = round3((time.Duration(t)*time.Second - last).Seconds())
			return rec
		}
	}
	rec.Seconds = round3(max(0, c.s.Duration-last).Seconds())
	return rec
}

// recoveryThreshold checks the run against MaxRecovery.
func (s Settings) recoveryThreshold(rep *Report) []Threshold {
	if s.MaxRecovery <= 0 || rep.Recovery == nil {
		return nil
	}
	r := rep.Recovery
	return []Threshold{{Name: "max-recovery", Limit: s.MaxRecovery.Seconds(), Value: r.Seconds, Unit: "s",
		OK: r.Recovered && r.Seconds <= s.MaxRecovery.Seconds()}}
}

// String renders the recovery as the text report writes it.
func (r *Recovery) String() string {
	base := fmt.Sprintf("baseline %.1f operations/s, p99 %s (before %s)", r.BaselineGoodput, fmtDuration(r.BaselineP99),
		fmtDuration(r.TriggerStart))
	if r.Recovered {
		return fmt.Sprintf("recovered %ss after the last trigger ended (at %s); %s", fmtFloat(r.Seconds), fmtDuration(r.TriggerEnd), base)
	}
	return fmt.Sprintf("METASTABLE: not recovered in the %ss from the last trigger's end (at %s) to the schedule's; %s",
		fmtFloat(r.Seconds), fmtDuration(r.TriggerEnd), base)
}
