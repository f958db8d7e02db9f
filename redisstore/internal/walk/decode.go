package walk

import (
	"fmt"
	"time"

	"github.com/idemkey/idemkey/redisstore/internal/record"
)

// pass decodes k, counts it, and hands it to fn if it passes the filters.
func (w *walker) pass(k *Key) error {
	k.Found, k.Problem = Decode(k)
	if k.Found == nil {
		w.st.NotRecords++
		return w.fn(k)
	}
	w.st.Records++
	if !w.o.keep(k.Found, w.now) {
		return nil
	}
	w.st.Matched++
	return w.fn(k)
}

// Decode decodes what was read of k: the record, or why it is not one
// (another application's key, another type, corrupt bytes, the format
// before 0.2, a started record too large to read).
func Decode(k *Key) (f *record.Found, problem string) {
	switch {
	case !k.Record:
		return nil, fmt.Sprintf("not a key name idemkey writes (a %s)", k.Type)
	case k.Type == "hash":
		return nil, "a record in the format of idemkey before 0.2, which expires with its retention"
	case k.Type != "":
		return nil, fmt.Sprintf("a %s, not an idemkey record", k.Type)
	case k.Value == "":
		return nil, "an empty string, not an idemkey record"
	}
	ttl := k.TTL // -1 (no TTL) comes as it is, in nanoseconds
	if ttl > 0 {
		ttl /= time.Millisecond
	}
	d, ok := record.DecodeLookup([]any{int64(ttl), "string", k.Value})
	switch {
	case !ok && k.Value[0] == record.KindStarted && !k.Whole:
		return nil, fmt.Sprintf("a started record of %d bytes, more than Scan reads (%d)", k.Size, StartedMax)
	case !ok:
		return nil, "a string that is not an idemkey record"
	}
	return &d, ""
}

// Problem says what is wrong with o's filters or Count, or is "".
func (o *Options) Problem() string {
	switch {
	case o.State != "" && o.State != "started" && o.State != "released" && o.State != "completed":
		return fmt.Sprintf("state %q is not started, released or completed", o.State)
	case o.Older < 0 || o.Count < 0:
		return "negative Older or Count"
	}
	return ""
}

// keep applies the filters to f.
func (o *Options) keep(f *record.Found, now time.Time) bool {
	switch {
	case o.State != "" && f.State() != o.State:
		return false
	case o.LeaseExpired && (f.Completed || f.LeaseTTL > 0):
		return false
	case o.Older > 0 && (f.Completed || f.Started.CreatedMS <= 0 ||
		now.Sub(time.UnixMilli(f.Started.CreatedMS)) <= o.Older):
		return false
	}
	return true
}
