package lru

import (
	"bytes"
	"time"
)

// Outcome is a completed record's outcome as Replays keeps it.
type Outcome struct {
	FP   [16]byte // the record's fingerprint
	Code int
	Body []byte
}

// Replays is the store's replay cache: a Cache of completed outcomes by
// record name, each for its record's fingerprint. The zero value is
// unusable: use NewReplays.
type Replays struct{ c *Cache[Outcome] }

// NewReplays returns Replays of at most max bytes.
func NewReplays(max int) *Replays { return &Replays{New[Outcome](max)} }

// Replay returns the outcome of the record named key when it is kept for
// fingerprint fp. An outcome kept for another fingerprint is not returned:
// the caller asks Redis, which answers the mismatch.
func (r *Replays) Replay(key string, fp *[16]byte) (Outcome, bool) {
	return r.c.Get(key, func(o *Outcome) bool { return sameFP(&o.FP, fp) })
}

// Keep keeps a copy of body, the outcome of the record named key, until
// expires: the caller may reuse its buffer.
func (r *Replays) Keep(key string, fp *[16]byte, code int, body []byte, expires time.Time) {
	body = bytes.Clone(body)
	r.c.Add(key, Outcome{FP: *fp, Code: code, Body: body}, len(key)+len(body)+96, expires)
}

// Remove drops the outcome of the record named key.
func (r *Replays) Remove(key string) { r.c.Remove(key) }
