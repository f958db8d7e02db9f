package faultschedule

import (
	"strings"
	"testing"
	"time"

	"github.com/idemkey/idemkey/redisstore"
	"github.com/idemkey/idemkey/storm"
)

// controlLease is the lease of the controls' guards: long enough for a
// slow run (controlSlow) to finish inside it, short enough for a paused
// or killed instance's keys to be taken over within the storm.
// controlRate is their operations per second (each sent twice at once):
// at 80, a race build on two cores shared with CPU-bound work could not
// keep up with the clients' retries, its Redis calls timed out, go-redis
// closed each timed-out connection and dialled anew, and no key answered
// for twenty seconds (a load the process made for itself, whatever the
// guard). At 40 every planted bug is still caught. It is also the rate of
// the schedules that must pass in the test command and CI (short,
// random): at 100 a second, beside the suite four packages at a time and
// two CPU-bound loops, no key answered for ten seconds.
const (
	controlLease = 600 * time.Millisecond
	controlSlow  = 350 * time.Millisecond
	controlRate  = 40
)

// controlSchedule is the same for every guard: an instance killed
// mid-handler and restarted, then another paused past the lease.
// The pause lasts five leases: a client waits a second for its attempt on
// the paused instance before it retries, and the bugs that need a takeover
// while the paused run sleeps (the fencing token) need a retry on the
// other instance inside the pause: with three leases, a loaded machine
// once let the pause end first.
var controlSchedule = Schedule{
	{Kind: Kill, At: 700 * time.Millisecond, For: 300 * time.Millisecond, Instance: 0},
	{Kind: Pause, At: 1400 * time.Millisecond, For: 5 * controlLease, Instance: 1},
}

// The liveness bounds of the controls. A planted bug is caught with a
// bound of three times lease + Retry-After + backoff: the claim without
// TTL holds its key for ever whatever the bound, and each operation stays
// until the bound has passed. The controls that must pass (idemkey, the
// toy without a bug) get passingBound: on a quiet machine their keys
// answer within two seconds of the faults, and .ci/run once saw a loaded
// machine answer nine seconds late (every complete of both instances
// timing out for seconds, no fault on Redis); passingBound is more than
// twice that, and a correct run ends when its keys answer, not at the
// bound.
const (
	caughtBound  = 3 * (controlLease + time.Second + 500*time.Millisecond)
	passingBound = 20 * time.Second
)

func runControl(t *testing.T, g Guard, bound time.Duration) *Result {
	t.Helper()
	r := Run(t, Config{Guard: g, Lease: controlLease, Slow: controlSlow, Rate: controlRate, Duration: 3 * time.Second, Dups: 2,
		Schedule: controlSchedule, Bound: bound})
	t.Logf("faults:\n  %s", strings.Join(r.Applied, "\n  "))
	t.Logf("checker over %s and %s:\n%s", r.HistoryPath, r.LedgerPath, r.Report)
	return r
}

// passes asserts that r broke no property, save for keys run again after
// the store reported an outcome not stored (ScheduleReport.Unannounced):
// with no fault on Redis, a complete fails only when the machine stalls
// past the middleware's Timeout, and the store says so; a silent second
// run, a second answer or a lost success fails.
func passes(t *testing.T, r *Result) {
	t.Helper()
	if n := r.Report.Unannounced(); n > 0 {
		t.Fatalf("%d violations the store did not announce:\n%s", n, r.Report)
	}
	if r.Report.Announced > 0 {
		t.Logf("%d keys run again after an outcome reported not stored (a stalled machine)", r.Report.Announced)
	}
}

// TestPlantedBugRealStorePasses runs the controls' harness on idemkey
// itself: no property is broken.
func TestPlantedBugRealStorePasses(t *testing.T) {
	passes(t, runControl(t, Real(redisstore.Options{Lease: controlLease}), passingBound))
}

// TestPlantedBugToyWithoutBugPasses: the toy guard is correct on the
// harness when no bug is planted, so that each bug below is what the
// checker catches.
func TestPlantedBugToyWithoutBugPasses(t *testing.T) {
	passes(t, runControl(t, Toy(BugNone, controlLease), passingBound))
}

// caught asserts that the checker caught bug by breaking prop.
func caught(t *testing.T, bug Bug, props ...string) {
	t.Helper()
	r := runControl(t, Toy(bug, controlLease), caughtBound)
	for _, p := range props {
		if r.Report.Counts[p] > 0 {
			t.Logf("planted bug %q caught: %s broken by %d keys", bug, p, r.Report.Counts[p])
			return
		}
	}
	t.Fatalf("planted bug %q not caught (want %v broken):\n%s", bug, props, r.Report)
}

func TestPlantedBugGetThenSetClaim(t *testing.T) {
	caught(t, BugGetThenSet, storm.PropAtMostOnce)
}

func TestPlantedBugCompleteWithoutFencingToken(t *testing.T) {
	caught(t, BugNoFence, storm.PropAtMostOnce, storm.PropLeases)
}

func TestPlantedBugReleaseOnEveryError(t *testing.T) {
	caught(t, BugReleaseOnError, storm.PropAtMostOnce)
}

func TestPlantedBug5xxStoredAsOutcome(t *testing.T) {
	caught(t, BugStore5xx, storm.PropNoLostSuccess)
}

func TestPlantedBugReplayCacheAliasesBuffer(t *testing.T) {
	caught(t, BugAliasBuffer, storm.PropOneAnswer)
}

func TestPlantedBugClaimWithoutTTL(t *testing.T) {
	caught(t, BugNoTTL, storm.PropLiveness)
}

func TestPlantedBugFingerprintSkippedOnFastPath(t *testing.T) {
	caught(t, BugSkipFingerprint, storm.PropMismatch)
}
