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
const (
	controlLease = 600 * time.Millisecond
	controlSlow  = 350 * time.Millisecond
)

// controlSchedule is the same for every guard: an instance killed
// mid-handler and restarted, then another paused past the lease.
var controlSchedule = Schedule{
	{Kind: Kill, At: 700 * time.Millisecond, For: 300 * time.Millisecond, Instance: 0},
	{Kind: Pause, At: 1400 * time.Millisecond, For: 3 * controlLease, Instance: 1},
}

func runControl(t *testing.T, g Guard) *Result {
	t.Helper()
	// A liveness bound of three times lease + Retry-After + backoff, not
	// four: the claim without TTL holds its key for ever whatever the
	// bound, and each operation stays until the bound has passed.
	r := Run(t, Config{Guard: g, Lease: controlLease, Slow: controlSlow, Rate: 80, Duration: 3 * time.Second, Dups: 2,
		Schedule: controlSchedule, Bound: 3 * (controlLease + time.Second + 500*time.Millisecond)})
	t.Logf("faults:\n  %s", strings.Join(r.Applied, "\n  "))
	t.Logf("checker over %s and %s:\n%s", r.HistoryPath, r.LedgerPath, r.Report)
	return r
}

// TestPlantedBugRealStorePasses runs the controls' harness on idemkey
// itself: no property is broken.
func TestPlantedBugRealStorePasses(t *testing.T) {
	r := runControl(t, Real(redisstore.Options{Lease: controlLease}))
	if !r.Report.OK() {
		t.Fatalf("idemkey broke a property:\n%s", r.Report)
	}
}

// TestPlantedBugToyWithoutBugPasses: the toy guard is correct on the
// harness when no bug is planted, so that each bug below is what the
// checker catches.
func TestPlantedBugToyWithoutBugPasses(t *testing.T) {
	r := runControl(t, Toy(BugNone, controlLease))
	if !r.Report.OK() {
		t.Fatalf("the toy guard without a bug broke a property:\n%s", r.Report)
	}
}

// caught asserts that the checker caught bug by breaking prop.
func caught(t *testing.T, bug Bug, props ...string) {
	t.Helper()
	r := runControl(t, Toy(bug, controlLease))
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
