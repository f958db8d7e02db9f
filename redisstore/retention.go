package redisstore

import (
	"fmt"
	"time"

	"github.com/idemkey/idemkey/redisstore/internal/lru"
	"github.com/idemkey/idemkey/redisstore/internal/record"
)

// retention is how long a record lives after its owner's last sign of
// life, in the forms the scripts take.
type retention = record.Retention

// retentions caches the retentions of Request.Retention, as the routes of
// the middleware set them: a few distinct values, each made once.
type retentions = lru.Memo[time.Duration, *retention]

func (s *Store) newRetention(d time.Duration) *retention {
	return record.NewRetention(d, s.opts.Lease, s.opts.TombstoneRetention)
}

// retentionOf returns the retention of a request's records: d, or the
// store's when d is 0. d has been validated.
func (s *Store) retentionOf(d time.Duration) *retention {
	if d == 0 || d == s.ret.D {
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
