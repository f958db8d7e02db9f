package redisstore

import (
	"fmt"
	"time"

	"github.com/idemkey/idemkey/redisstore/internal/lru"
	"github.com/idemkey/idemkey/redisstore/internal/record"
)

// retention is how long a record lives after its owner's last sign of
// life, in the forms the scripts take (record.RetentionArgs). The lease
// is the store's whatever the retention: every record holds its
// threshold, so a takeover, a forget or a check reads the lease from the
// record itself.
type retention struct {
	d         time.Duration
	ms        any    // the retention in ms, boxed once: claim, extend, checkpoint
	threshold string // retention - lease in ms, written into started records
	tombstone any    // retention + tombstone retention in ms: a tombstone's TTL
}

// retentions caches the retentions of Request.Retention, as the routes of
// the middleware set them: a few distinct values, each made once.
type retentions = lru.Memo[time.Duration, *retention]

func (s *Store) newRetention(d time.Duration) *retention {
	ms, threshold, tombstone := record.RetentionArgs(d, s.opts.Lease, s.opts.TombstoneRetention)
	return &retention{d: d, ms: ms, threshold: threshold, tombstone: tombstone}
}

// retentionOf returns the retention of a request's records: d, or the
// store's when d is 0. d has been validated.
func (s *Store) retentionOf(d time.Duration) *retention {
	if d == 0 || d == s.ret.d {
		return s.ret
	}
	if r, ok := s.rets.Load(d); ok {
		return r
	}
	return s.rets.Store(d, s.newRetention(d))
}

// ValidateRetention returns nil if d may be a Request.Retention on this
// store: 0 (the store's Options.Retention), or at least a millisecond
// longer than its Lease and than its MaxDuration, if set, so that a record
// outlives its lease and any run. Otherwise it returns an error matching
// ErrInvalidRequest, which Claim and Do return for such a request. The
// middleware packages call it when they are built, for their Retention
// option.
func (s *Store) ValidateRetention(d time.Duration) error {
	if p := record.RetentionProblem(d, s.opts.Lease, s.opts.MaxDuration); p != "" {
		return fmt.Errorf("%w: %s", ErrInvalidRequest, p)
	}
	return nil
}
