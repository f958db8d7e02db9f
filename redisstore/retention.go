package redisstore

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// retention is how long a record lives after its owner's last sign of
// life, in the forms the scripts take. The lease is the store's whatever
// the retention: a started record's lease is held while its PTTL stays
// above its threshold, the retention minus the lease, so every record
// holds its threshold (lua.go) and a takeover, a forget or a check reads
// the lease from the record itself.
type retention struct {
	d         time.Duration
	ms        any    // the retention in ms, boxed once: claim, extend, checkpoint
	threshold string // retention - lease in ms, written into started records
	tombstone any    // retention + tombstone retention in ms: a tombstone's TTL
}

// retentions caches the retentions of Request.Retention, as the routes of
// the middleware set them: a few distinct values, each made once. Past
// maxRetentions distinct values (a program that computes one per call),
// they are made per call.
type retentions struct {
	m sync.Map // time.Duration -> *retention
	n atomic.Int32
}

const maxRetentions = 64

func (s *Store) newRetention(d time.Duration) *retention {
	return &retention{
		d:         d,
		ms:        strconv.FormatInt(d.Milliseconds(), 10),
		threshold: strconv.FormatInt((d - s.opts.Lease).Milliseconds(), 10),
		tombstone: strconv.FormatInt((d + s.opts.TombstoneRetention).Milliseconds(), 10),
	}
}

// retentionOf returns the retention of a request's records: d, or the
// store's when d is 0. d has been validated.
func (s *Store) retentionOf(d time.Duration) *retention {
	if d == 0 || d == s.ret.d {
		return s.ret
	}
	if r, ok := s.rets.m.Load(d); ok {
		return r.(*retention)
	}
	r := s.newRetention(d)
	if s.rets.n.Add(1) <= maxRetentions {
		if prev, loaded := s.rets.m.LoadOrStore(d, r); loaded {
			return prev.(*retention)
		}
	}
	return r
}

// ValidateRetention returns nil if d may be a Request.Retention on this
// store: 0 (the store's Options.Retention), or at least a millisecond
// longer than its Lease and than its MaxDuration, if set, so that a record
// outlives its lease and any run. Otherwise it returns an error matching
// ErrInvalidRequest, which Claim and Do return for such a request. The
// middleware packages call it when they are built, for their Retention
// option.
func (s *Store) ValidateRetention(d time.Duration) error {
	switch {
	case d == 0:
		return nil
	case d < 0:
		return fmt.Errorf("%w: negative retention %v", ErrInvalidRequest, d)
	case d.Truncate(time.Millisecond) <= s.opts.Lease:
		return fmt.Errorf("%w: retention %v does not exceed the store's lease %v", ErrInvalidRequest, d, s.opts.Lease)
	case s.opts.MaxDuration > 0 && d.Truncate(time.Millisecond) <= s.opts.MaxDuration:
		return fmt.Errorf("%w: retention %v does not exceed the store's max duration %v", ErrInvalidRequest, d, s.opts.MaxDuration)
	}
	return nil
}
