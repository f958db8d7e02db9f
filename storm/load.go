package storm

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkey/idemkey/idemclient"
)

// Load mode: operations arrive on a fixed schedule (open loop), each with
// its own key, sent Dups times at once; every copy retries on its own, with
// the same key and body, as idemclient.Policy says, each attempt bounded by
// AttemptTimeout and the whole operation by Timeout. See the package
// documentation.

// loadOp is what load mode keeps per operation beside its record in the
// history (Operation: its schedule, end and lateness).
type loadOp struct {
	started bool // sent at least one attempt
	failed  bool // a copy ended without a final answer
}

// loadKey is a key of load mode with its operation's figures, in one
// allocation: a load run keeps every key until its report.
type loadKey struct {
	keyRun
	run loadOp
}

// loader is the state of one load-mode run.
type loader struct {
	*runner
	start  time.Time
	slots  chan struct{} // one per attempt in flight (MaxInFlight)
	policy idemclient.Policy
	rp     *idemclient.RetryPolicy // the arm's retry policy (armpolicy.go)

	ops []*keyRun // in schedule order, appended by the pacer, read when it is done

	// live figures, for the progress line
	opsStarted atomic.Int64
	conflicts  atomic.Int64 // 409 answers
	errs       atomic.Int64 // timeouts, transport errors and 5xx
	live       *liveHist
	metrics    *Metrics // Config.Metrics; nil records nothing
	err        error    // why the pacer stopped early; set by the pacer
}

// load runs the load-mode storm: it schedules the operations of
// Config.schedule (Rate*Duration, or the Stages' arrivals) and
// waits for every one of them to end. It returns the operations created.
func (r *runner) load(ctx context.Context, start time.Time, l *loader) []*keyRun {
	cfg := r.cfg
	total := cfg.operations()
	var wg sync.WaitGroup
	// Operations run on workers that take the next one when they are done,
	// so that a goroutine's grown stack serves many; the pacer starts a new
	// worker when none is idle, and never waits for one.
	work := make(chan *keyRun)
	worker := func(k *keyRun) {
		for ok := true; ok; k, ok = <-work {
			l.operation(ctx, k)
		}
	}
	sched := cfg.schedule()
	l.metrics = cfg.Metrics
	l.metrics.begin(sched, start)
	defer l.metrics.end()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	l.ops = make([]*keyRun, 0, min(total, 1<<20))
	for i := range total {
		// The operation is made before its time comes, so that its
		// start waits for nothing but a worker.
		due := sched.due(i)
		lk := &loadKey{}
		k := &lk.keyRun
		k.run = &lk.run
		if err := r.initKeyRun(k, i); err != nil {
			l.err = err
			break
		}
		k.op.Scheduled = due
		if wait := time.Until(start.Add(due)); wait > 50*time.Microsecond {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		l.ops = append(l.ops, k)
		l.metrics.add(counterScheduled)
		select {
		case work <- k:
		default:
			wg.Go(func() { worker(k) })
		}
	}
	close(work)
	wg.Wait()
	return l.ops
}

// operation sends the copies of one operation and waits for them, then
// records its end.
func (l *loader) operation(ctx context.Context, k *keyRun) {
	due := l.start.Add(k.op.Scheduled)
	octx, cancel := context.WithDeadline(ctx, due.Add(l.cfg.Timeout))
	defer cancel()
	if n := l.cfg.Dups; n > 1 {
		var wg sync.WaitGroup
		for c := 1; c < n; c++ {
			wg.Go(func() { l.copy(ctx, octx, k, due, c) })
		}
		l.copy(ctx, octx, k, due, 0)
		wg.Wait()
	} else {
		l.copy(ctx, octx, k, due, 0)
	}
	end := time.Since(l.start)
	k.mu.Lock()
	k.op.Ended = end
	failed, started := k.run.failed, k.run.started
	l.history.operation(k.op, true)
	k.mu.Unlock()
	if l.metrics != nil {
		lat := end - k.op.Scheduled
		if !started {
			lat = l.cfg.Timeout // as the report counts it
		}
		l.metrics.operationEnded(started, failed, lat)
	}
	if l.live != nil && !failed {
		l.live.add(end - k.op.Scheduled)
	}
}

// copy is one client sending the operation: attempts with the same key and
// body until a final answer, Retries retries, or the operation's deadline.
// An attempt is recorded once it is known whether another followed it.
func (l *loader) copy(ctx, octx context.Context, k *keyRun, due time.Time, copyN int) {
	deadline, _ := octx.Deadline()
	final := false
	var pending result
	hasPending := false
	defer func() {
		if hasPending {
			l.record(k, &pending.Attempt, false)
		}
		if !final {
			k.mu.Lock()
			k.run.failed = true
			k.mu.Unlock()
		}
	}()
	if !l.allow(1) {
		return // rejected locally (adaptive): nothing sent
	}
	for n := 0; ; n++ {
		// An attempt in flight holds a slot; one that cannot get a slot
		// at once waits, and its operation is late if it is its first.
		select {
		case l.slots <- struct{}{}:
		default:
			if n == 0 {
				k.mu.Lock()
				late := !k.op.Late
				k.op.Late = true
				k.mu.Unlock()
				if late {
					l.metrics.add(counterLate)
				}
			}
			select {
			case l.slots <- struct{}{}:
			case <-octx.Done():
				return
			}
		}
		if n == 0 {
			k.mu.Lock()
			first := !k.run.started
			k.run.started = true
			k.mu.Unlock()
			if first {
				l.opsStarted.Add(1)
				l.metrics.add(counterStarted)
			}
		}
		if hasPending {
			l.record(k, &pending.Attempt, true)
			hasPending = false
		}
		actx, cancel := octx, context.CancelFunc(nil)
		if l.cfg.AttemptTimeout > 0 {
			actx, cancel = context.WithTimeout(octx, l.cfg.AttemptTimeout)
		}
		l.metrics.sending(1)
		a, ok := l.send(ctx, actx, k, false)
		l.metrics.sending(-1)
		l.metrics.attempt(a.Class) // an interrupted attempt has no class: not counted, as not recorded
		if cancel != nil {
			cancel()
		}
		<-l.slots
		a.Copy, a.Attempt.Attempt = copyN, n+1
		if !ok {
			l.record(k, &a.Attempt, false) // interrupted in flight
			return
		}
		l.attempts.Add(1)
		switch {
		case a.Class == ClassInProgress:
			l.conflicts.Add(1)
		case a.Class.Lost() || a.Class == ClassServerError:
			l.errs.Add(1)
		}
		retry := l.policy.Retryable(idemclient.Attempt{Status: a.Status, Err: a.err, Replayed: a.Replayed}, true)
		l.done(!retry)
		if !retry {
			final = a.Class == ClassReplay || (a.Class.Executes() && a.Class != ClassServerError)
			l.record(k, &a.Attempt, false)
			return
		}
		pending, hasPending = a, true
		if n >= l.cfg.Retries || octx.Err() != nil {
			return
		}
		now := time.Now()
		wait := l.delay(n+1, a.retryAfter, now)
		if !now.Add(wait).Before(deadline) {
			return // no time left for another attempt
		}
		if !l.allow(n + 2) {
			return // the policy has no retry left (budget, token-bucket, adaptive)
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-octx.Done():
				t.Stop()
				return
			}
		}
		l.retries.Add(1)
	}
}

// newLoader prepares load mode's state.
func (r *runner) newLoader(start time.Time) *loader {
	l := &loader{runner: r, start: start, slots: make(chan struct{}, r.cfg.MaxInFlight), policy: r.cfg.Policy}
	l.rp = r.retryPolicy()
	if r.cfg.Progress != nil {
		l.live = &liveHist{}
	}
	return l
}

// startProgress starts load mode's progress line, rewritten once a second,
// and returns the function that stops it and clears the line.
func (l *loader) startProgress() func() {
	w := l.cfg.Progress
	if w == nil {
		return func() {}
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(time.Second)
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
				ops, attempts := l.opsStarted.Load(), l.attempts.Load()
				amp := 0.0
				if ops > 0 {
					amp = float64(attempts) / float64(ops)
				}
				p99 := "-"
				if d, n := l.live.take(); n > 0 {
					p99 = fmtDuration(d)
				}
				line := fmt.Sprintf("storm: %s  operations %d/%d  attempts %d  amplification %.2f  p99 %s  409s %d  errors %d",
					fmtDuration(now.Sub(l.start).Truncate(time.Second)), ops, l.cfg.operations(), attempts, amp, p99,
					l.conflicts.Load(), l.errs.Load())
				if l.probing.Load() {
					line = fmt.Sprintf("storm: late probe, %d/%d keys done", l.probed.Load(), ops)
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
