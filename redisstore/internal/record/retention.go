package record

import (
	"fmt"
	"strconv"
	"time"
)

// RetentionArgs returns a retention d in the forms the scripts take, in
// decimal milliseconds: d itself (claim, extend, checkpoint); the
// threshold written into started records, d minus the lease, so that a
// record's lease is held while its PTTL stays above it whatever the
// retention; and a tombstone's TTL, d plus the tombstone retention.
func RetentionArgs(d, lease, tombstone time.Duration) (ms, threshold, tombstoneMS string) {
	return strconv.FormatInt(d.Milliseconds(), 10),
		strconv.FormatInt((d - lease).Milliseconds(), 10),
		strconv.FormatInt((d + tombstone).Milliseconds(), 10)
}

// RetentionProblem says why d may not be a request's retention on a store
// with this lease and max duration (0: none), or returns "" when it may:
// 0 (the store's), or at least a millisecond longer than the lease and
// than the max duration, so that a record outlives its lease and any run.
func RetentionProblem(d, lease, maxDuration time.Duration) string {
	switch {
	case d == 0:
		return ""
	case d < 0:
		return fmt.Sprintf("negative retention %v", d)
	case d.Truncate(time.Millisecond) <= lease:
		return fmt.Sprintf("retention %v does not exceed the store's lease %v", d, lease)
	case maxDuration > 0 && d.Truncate(time.Millisecond) <= maxDuration:
		return fmt.Sprintf("retention %v does not exceed the store's max duration %v", d, maxDuration)
	}
	return ""
}

// Retention is a record's retention in the forms the scripts take
// (RetentionArgs), made once per distinct retention and boxed once, so
// that a call's arguments cost no allocation. The lease is the store's
// whatever the retention: every started record holds its Threshold, so a
// takeover, a forget or a check reads the lease from the record itself.
type Retention struct {
	D         time.Duration
	MS        any    // D in ms: claim, extend, checkpoint
	Threshold string // D - lease in ms, written into started records
	Tombstone any    // D + the tombstone retention in ms: a tombstone's TTL
}

// NewRetention returns retention d on a store with this lease and
// tombstone retention.
func NewRetention(d, lease, tombstone time.Duration) *Retention {
	ms, threshold, tomb := RetentionArgs(d, lease, tombstone)
	return &Retention{D: d, MS: ms, Threshold: threshold, Tombstone: tomb}
}
