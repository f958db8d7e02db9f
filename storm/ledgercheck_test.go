package storm

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Histories and ledgers written by hand: each property is shown deciding a
// key that no other property decides.

var ledgerEpoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// run is a ledger line of key-0's execution id with token, from start to
// end milliseconds after the history's start.
func run(key, id string, token, start, end int) Effect {
	return Effect{Key: key, Effect: "charge", Execution: id, Attempt: token,
		Start: ledgerEpoch.Add(msec(start)), End: ledgerEpoch.Add(msec(end))}
}

func refusal(key, id string) Effect { return Effect{Key: key, Execution: id, Refused: true} }

func scheduleOf(t *testing.T, h *History, opts ScheduleOptions) *ScheduleReport {
	t.Helper()
	r, err := CheckSchedule(h, opts)
	require.NoError(t, err)
	t.Log(r)
	return r
}

// only asserts that prop is the one property broken, by one key.
func only(t *testing.T, r *ScheduleReport, prop string) {
	t.Helper()
	for _, p := range Properties {
		want := 0
		if p == prop {
			want = 1
		}
		require.Equal(t, want, r.Counts[p], "property %s", p)
	}
	require.Len(t, r.Violations, 1)
	require.Equal(t, prop, r.Violations[0].Property)
	require.Contains(t, r.String(), prop+" ")
}

func TestCheckSchedulePassesACleanHistory(t *testing.T) {
	h := burst([]Attempt{att(ClassOriginal, 201, "a", 0, 10), att(ClassReplay, 201, "a", 20, 30).probe()})
	h.Ledger = []Effect{run("key-0", "x1", 1, 1, 5)}
	r := scheduleOf(t, h, ScheduleOptions{Bound: time.Second})
	require.True(t, r.OK())
	require.Equal(t, 1, r.Executions)
	require.Equal(t, 0, r.Duplicates)
}

func TestCheckScheduleAtMostOnce(t *testing.T) {
	// Two executions one after the other (no overlap, so leases hold),
	// whose answers were lost: only the ledger knows.
	h := burst([]Attempt{att(ClassTimeout, 0, "", 0, 10).retried(), att(ClassTimeout, 0, "", 20, 30).number(2)})
	h.Ledger = []Effect{run("key-0", "x1", 1, 1, 5), run("key-0", "x2", 2, 21, 25)}
	r := scheduleOf(t, h, ScheduleOptions{})
	only(t, r, PropAtMostOnce)
	require.Equal(t, 1, r.Duplicates)
}

func TestCheckScheduleCountsARecordedRefusalAsNoEffect(t *testing.T) {
	// The first run was paused past its lease; the second took over with
	// a higher token; the first's completion was refused, and the
	// service recorded it on a line of its own.
	h := burst([]Attempt{att(ClassOriginal, 201, "b", 0, 40)})
	h.Ledger = []Effect{run("key-0", "x2", 2, 10, 20), run("key-0", "x1", 1, 1, 30), refusal("key-0", "x1")}
	r := scheduleOf(t, h, ScheduleOptions{})
	require.True(t, r.OK())
	require.Equal(t, 1, r.Refused)
	require.Equal(t, 1, r.Executions)

	// Without the refusal both count, and they overlap: two properties.
	h.Ledger = h.Ledger[:2]
	r = scheduleOf(t, h, ScheduleOptions{})
	require.Equal(t, 1, r.Counts[PropAtMostOnce])
	require.Equal(t, 1, r.Counts[PropLeases])
	require.Equal(t, 1, r.Counts[PropNoLostSuccess])
}

func TestCheckScheduleNoLostSuccess(t *testing.T) {
	// A replay says the key ran, but the ledger has no execution: a 5xx
	// stored as the outcome, replayed.
	h := burst([]Attempt{att(ClassReplay, 500, "oops", 0, 10)})
	h.Ledger = []Effect{}
	only(t, scheduleOf(t, h, ScheduleOptions{}), PropNoLostSuccess)
}

func TestCheckScheduleOneAnswer(t *testing.T) {
	h := burst([]Attempt{att(ClassOriginal, 201, "a", 0, 10), att(ClassReplay, 201, "b", 20, 30).onCopy(1)})
	h.Ledger = []Effect{run("key-0", "x1", 1, 1, 5)}
	only(t, scheduleOf(t, h, ScheduleOptions{}), PropOneAnswer)
}

func TestCheckScheduleOneAnswerIgnoresLostAndRetriedAnswers(t *testing.T) {
	// A timed-out attempt is an unknown output; a retried 409 is no answer.
	h := burst([]Attempt{att(ClassTimeout, 0, "", 0, 10).retried(), att(ClassInProgress, 409, "busy", 11, 12).retried().number(2),
		att(ClassReplay, 201, "a", 20, 30).number(3), att(ClassOriginal, 201, "a", 5, 15).onCopy(1)})
	h.Ledger = []Effect{run("key-0", "x1", 1, 1, 5)}
	require.True(t, scheduleOf(t, h, ScheduleOptions{}).OK())
}

func TestCheckScheduleMismatch(t *testing.T) {
	h := burst([]Attempt{att(ClassOriginal, 201, "a", 0, 10)})
	h.Ledger = []Effect{run("key-0", "x1", 1, 1, 5)}
	foreign := []Attempt{att(ClassMismatch, 422, "no", 40, 50), att(ClassReplay, 201, "a", 60, 70)}
	foreign[0].Key, foreign[1].Key = "key-0", "key-0"
	r := scheduleOf(t, h, ScheduleOptions{Foreign: foreign})
	only(t, r, PropMismatch)
	require.Contains(t, r.Violations[0].Detail, "201")
}

func TestCheckScheduleLeases(t *testing.T) {
	// Two overlapping runs, the later with a higher token, the earlier's
	// completion refused: allowed (the test above). A later one with the
	// same token is not, refused or not.
	h := burst([]Attempt{att(ClassOriginal, 201, "a", 0, 40)})
	h.Ledger = []Effect{run("key-0", "x1", 1, 1, 30), refusal("key-0", "x1"), run("key-0", "x2", 1, 10, 20)}
	only(t, scheduleOf(t, h, ScheduleOptions{}), PropLeases)
}

func TestCheckScheduleLiveness(t *testing.T) {
	// Healed at 100ms, bound 50ms: key-0 was sent again at 120ms and only
	// got 409s; key-1 was answered at 130ms; key-2 was not sent after the
	// heal.
	h := burst(
		[]Attempt{att(ClassInProgress, 409, "busy", 120, 125).retried(), att(ClassInProgress, 409, "busy", 190, 195).number(2)},
		[]Attempt{att(ClassInProgress, 409, "busy", 110, 115).retried(), att(ClassOriginal, 201, "a", 120, 130).number(2)},
		[]Attempt{att(ClassTimeout, 0, "", 0, 90)},
	)
	h.Ledger = []Effect{run("key-1", "x1", 1, 121, 125)}
	r := scheduleOf(t, h, ScheduleOptions{Healed: msec(100), Bound: msec(50)})
	only(t, r, PropLiveness)
	require.Equal(t, "key-0", r.Violations[0].Key)
}

func TestExecutionsMergesLinesByID(t *testing.T) {
	xs := Executions([]Effect{
		{Key: "k", Execution: "a", Token: "3", Start: ledgerEpoch.Add(msec(5)), End: ledgerEpoch.Add(msec(9))},
		{Key: "k", Effect: "email"},
		refusal("k", "a"),
		{Key: "k", Execution: "a", Effect: "email", Start: ledgerEpoch.Add(msec(2))},
	})["k"]
	require.Len(t, xs, 2)
	require.Equal(t, "#2", xs[0].ID) // no start sorts first
	a := xs[1]
	require.Equal(t, Execution{Key: "k", ID: "a", Token: 3, Start: ledgerEpoch.Add(msec(2)), End: ledgerEpoch.Add(msec(9)), Refused: true}, a)
}

func TestReadLedgerReadsTimes(t *testing.T) {
	es, err := ReadLedger(strings.NewReader(`{"key":"k","execution":"a","attempt":2,"start":"2026-01-02T03:04:05.001Z","end":"2026-01-02T03:04:05.002Z"}` + "\n" +
		`{"key":"k","execution":"a","refused":true}` + "\n"))
	require.NoError(t, err)
	require.Len(t, es, 2)
	require.Equal(t, ledgerEpoch.Add(msec(1)), es[0].Start)
	require.Equal(t, ledgerEpoch.Add(msec(2)), es[0].End)
	require.True(t, es[1].Refused)

	// Check's ledger rule counts the execution refused on a later line
	// as none: key-0 ran twice, once for good.
	h := burst([]Attempt{att(ClassOriginal, 201, "a", 0, 10)})
	for _, e := range es {
		e.Key = "key-0"
		h.Ledger = append(h.Ledger, e)
	}
	h.Ledger = append(h.Ledger, Effect{Key: "key-0", Execution: "b"})
	rep, err := Check(h)
	require.NoError(t, err)
	require.Equal(t, 1, rep.KeysPassed, "%+v", rep.Failures)
	require.Equal(t, 0, rep.KeysFailed)
}

func TestCheckScheduleAnnouncedDuplicates(t *testing.T) {
	// The first run's outcome could not be stored and the service was
	// told: the second run still breaks at most once, but is announced.
	h := burst([]Attempt{att(ClassTimeout, 0, "", 0, 10).retried(), att(ClassOriginal, 201, "b", 20, 30).number(2)})
	first := run("key-0", "x1", 1, 1, 5)
	h.Ledger = []Effect{first, {Key: "key-0", Execution: "x1", NotStored: true}, run("key-0", "x2", 2, 21, 25)}
	r := scheduleOf(t, h, ScheduleOptions{})
	require.Equal(t, 1, r.Counts[PropAtMostOnce])
	require.Equal(t, 1, r.Counts[PropNoLostSuccess])
	require.Equal(t, 1, r.Announced)
	require.Equal(t, 0, r.Unannounced())
	require.Contains(t, r.Violations[0].Detail, "outcome not stored")

	// Unannounced, it counts.
	h.Ledger = []Effect{first, run("key-0", "x2", 2, 21, 25)}
	r = scheduleOf(t, h, ScheduleOptions{})
	require.Equal(t, 0, r.Announced)
	require.Equal(t, 2, r.Unannounced())
}

func TestCheckScheduleAnnouncedOverlap(t *testing.T) {
	// A run paused past its lease resumes while its key's new owner runs;
	// its completion could not be stored (Redis was down), so nothing
	// refused it, but the service was told.
	h := burst([]Attempt{att(ClassOriginal, 201, "b", 0, 40)})
	h.Ledger = []Effect{run("key-0", "x1", 1, 1, 30), {Key: "key-0", Execution: "x1", NotStored: true}, run("key-0", "x2", 2, 10, 20)}
	r := scheduleOf(t, h, ScheduleOptions{})
	require.Equal(t, 1, r.Counts[PropLeases])
	require.Equal(t, 0, r.Unannounced())
}

func TestCheckScheduleMalformedLedgerIsNotOK(t *testing.T) {
	h := burst([]Attempt{att(ClassOriginal, 201, "a", 0, 10)})
	h.Ledger = []Effect{run("key-0", "x1", 1, 1, 5), {}}
	r := scheduleOf(t, h, ScheduleOptions{})
	require.Equal(t, 1, r.Malformed)
	require.False(t, r.OK())
	require.Equal(t, 1, r.Unannounced())
	require.Equal(t, 1, r.Executions)
	require.Contains(t, r.String(), "malformed")
}
