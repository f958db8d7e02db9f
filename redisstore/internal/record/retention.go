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
