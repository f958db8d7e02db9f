package record

import (
	"fmt"
	"time"
)

// Reply status codes of claim.lua and legacy.lua, the first element of
// their reply; the scripts' header comments list the same. Keep them in
// step.
const (
	Unknown      = 0 // {0}: not a record the script knows (a reply DecodeClaim refuses)
	Owned        = 1 // {1, attempt, record before the claim or ''}
	Replay       = 2 // {2, completed record[, record pttl]}
	InProgress   = 3 // {3, lease ms left}
	Mismatch     = 4 // {4}
	Legacy       = 5 // {5}: a record in the previous format; run legacy.lua
	Expired      = 6 // {6, code, attempt}: only the tombstone is left
	LegacyReplay = 7 // {7, code, body}: legacy.lua's replay
)

// ClaimReply is a decoded reply of claim.lua or legacy.lua.
type ClaimReply struct {
	Status    int64         // one of the reply status codes
	Attempt   int           // Owned: the claim's attempt; Replay, Expired: the outcome's
	Record    string        // Owned: the started record before the claim, or ""
	Code      int           // Replay, LegacyReplay, Expired: the outcome's code
	Body      []byte        // Replay, LegacyReplay: the outcome
	LeaseLeft time.Duration // InProgress: how long the owner's lease has left
	TTL       time.Duration // Replay, when asked: how long the record lives
}

// DecodeClaim checks the shape of a claim reply and decodes it; ok is false
// for a reply of any other shape. This is the one place where a claim
// reply is taken apart (DecodeForget is forget's). legacy.lua's "the record went meanwhile" (Owned
// with attempt 0) decodes as Legacy: claim afresh.
func DecodeClaim(reply any) (c ClaimReply, ok bool) {
	r, ok := reply.([]any)
	if !ok || len(r) == 0 {
		return c, false
	}
	status, ok := r[0].(int64)
	if !ok {
		return c, false
	}
	c.Status = status
	switch {
	case status == Owned && len(r) == 3:
		attempt, ok1 := r[1].(int64)
		rec, ok2 := r[2].(string)
		if !ok1 || !ok2 || attempt < 0 {
			break
		}
		if attempt == 0 { // legacy.lua: the record went meanwhile
			return ClaimReply{Status: Legacy}, true
		}
		if rec != "" {
			if _, _, ok := ParseStarted(rec); !ok {
				break
			}
		}
		c.Attempt, c.Record = int(attempt), rec
		return c, true
	case status == Replay && (len(r) == 2 || len(r) == 3):
		rec, ok := r[1].(string)
		if !ok {
			break
		}
		if len(r) == 3 {
			ms, ok := r[2].(int64)
			if !ok {
				break
			}
			c.TTL = pttl(ms)
		}
		att, code, body, ok := ParseCompleted(rec)
		if !ok {
			break
		}
		c.Attempt, c.Code, c.Body = att, code, []byte(body)
		return c, true
	case status == LegacyReplay && len(r) == 3:
		code, ok1 := r[1].(int64)
		body, ok2 := r[2].(string)
		if !ok1 || !ok2 {
			break
		}
		c.Code, c.Body = int(code), []byte(body)
		return c, true
	case status == InProgress && len(r) == 2:
		ms, ok := r[1].(int64)
		if !ok {
			break
		}
		c.LeaseLeft = pttl(ms)
		return c, true
	case status == Expired && len(r) == 3:
		code, ok1 := r[1].(int64)
		att, ok2 := r[2].(int64)
		if !ok1 || !ok2 {
			break
		}
		c.Code, c.Attempt = int(code), int(att)
		return c, true
	case (status == Mismatch || status == Legacy) && len(r) == 1:
		return c, true
	}
	return ClaimReply{}, false
}

// DecodeOwned decodes the reply of complete, release, extend and
// checkpoint: 1 when the caller's token owned the record and the write was
// made, 0 when it did not own it and nothing was written; ok is false for
// any other reply.
func DecodeOwned(reply any) (owned, ok bool) {
	switch reply {
	case int64(1):
		return true, true
	case int64(0):
		return false, true
	}
	return false, false
}

// Found is lookup.lua's reply, decoded.
type Found struct {
	// Type is the key's Redis type: "none" (no record), "hash" (a record in
	// the format before 0.2) or "string"; the fields below TTL are set for
	// a string only.
	Type string
	// TTL is how long the key has left to live.
	TTL time.Duration

	Fingerprint string // the stored fingerprint
	Completed   bool   // a completed record; else a started one
	Released    bool   // a started record whose owner gave its lease back (flags 'r')
	Started     Started
	// LeaseTTL is how long a started record's lease has left; 0 once the
	// lease ran out or was given back.
	LeaseTTL time.Duration
	Attempt  int    // the completed record's (a started one's is in Started)
	Code     int    // the completed record's outcome
	Body     string // the completed record's outcome
}

// State is the record's state, by the names of redisstore's State:
// "completed", "released" or "started".
func (f *Found) State() string {
	switch {
	case f.Completed:
		return "completed"
	case f.Released:
		return "released"
	}
	return "started"
}

// DecodeLookup checks the shape of lookup.lua's reply {pttl, type, value}
// and decodes the record in it; ok is false for a reply of any other shape
// or a string that is not a record.
func DecodeLookup(reply any) (f Found, ok bool) {
	r, ok := reply.([]any)
	if !ok || len(r) != 3 {
		return f, false
	}
	ttl, ok1 := r[0].(int64)
	typ, ok2 := r[1].(string)
	v, ok3 := r[2].(string)
	if !ok1 || !ok2 || !ok3 {
		return f, false
	}
	f.Type, f.TTL = typ, pttl(ttl)
	if typ == "none" || typ == "hash" {
		return f, true
	}
	if len(v) >= OffFP+FPLen {
		f.Fingerprint = v[OffFP : OffFP+FPLen]
	}
	if st, _, ok := ParseStarted(v); ok {
		f.Started, f.Released = st, v[1] == FlagReleased
		if !f.Released {
			thr, _ := Threshold(v)
			f.LeaseTTL = pttl(ttl - thr)
		}
		return f, true
	}
	if att, code, body, ok := ParseCompleted(v); ok {
		f.Completed, f.Attempt, f.Code, f.Body = true, att, code, body
		return f, true
	}
	return Found{}, false
}

// Show formats a reply a decoder refused, for an error message: in Go
// syntax, cut after 200 bytes.
func Show(reply any) string {
	s := fmt.Sprintf("%#v", reply)
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// pttl turns a PTTL reply into a duration; "no key" and "no expiry" become 0.
func pttl(ms int64) time.Duration {
	return time.Duration(max(ms, 0)) * time.Millisecond
}

// Reply status codes of forget.lua, the first element of its reply; the
// script's header comment lists the same. Keep them in step.
const (
	ForgetNothing = 0 // {0}: no record, no tombstone
	Forgotten     = 1 // {1, record as it was (a completed one cut after its code) or '', lease ms it fenced}
	ForgetForeign = 2 // {2, Redis type}: not an idemkey record, left alone
	ForgetRefused = 3 // {3, lease ms left}: a live lease, and not forced
)

// ForgetReply is a decoded reply of forget.lua.
type ForgetReply struct {
	Status    int64         // one of the forget status codes
	Record    string        // Forgotten: the record as it was (see the code), or ""
	Type      string        // ForgetForeign: the key's Redis type
	LeaseLeft time.Duration // ForgetRefused: how long the owner's lease has left; Forgotten: what it had left, fenced
}

// DecodeForget checks the shape of forget.lua's reply and decodes it; ok is
// false for a reply of any other shape, or a forgotten record that is not
// one.
func DecodeForget(reply any) (f ForgetReply, ok bool) {
	r, ok := reply.([]any)
	if !ok || len(r) == 0 {
		return f, false
	}
	status, ok := r[0].(int64)
	if !ok {
		return f, false
	}
	f.Status = status
	switch {
	case status == ForgetNothing && len(r) == 1:
		return f, true
	case status == Forgotten && len(r) == 3:
		v, ok1 := r[1].(string)
		ms, ok2 := r[2].(int64)
		if !ok1 || !ok2 {
			break
		}
		if v != "" {
			if _, _, ok := ParseStarted(v); !ok {
				if _, _, _, ok := ParseCompleted(v); !ok {
					break
				}
			}
		}
		f.Record, f.LeaseLeft = v, pttl(ms)
		return f, true
	case status == ForgetForeign && len(r) == 2:
		if f.Type, ok = r[1].(string); ok {
			return f, true
		}
	case status == ForgetRefused && len(r) == 2:
		if ms, ok := r[1].(int64); ok {
			f.LeaseLeft = pttl(ms)
			return f, true
		}
	}
	return ForgetReply{}, false
}

// Facts returns what a forgotten record told of its run: the label and
// attempt of a started one, the attempt and stored status of a completed
// one, zero values for anything else.
func (f ForgetReply) Facts() (label string, attempt, status int) {
	if st, _, ok := ParseStarted(f.Record); ok {
		return st.Label, st.Attempt, 0
	}
	if att, code, _, ok := ParseCompleted(f.Record); ok {
		return "", att, code
	}
	return "", 0, 0
}
