package redisstore

import (
	"errors"
	"fmt"
	"time"
)

// Reply status codes of claim.lua and legacy.lua; keep them in step.
const (
	replyUnknown      = 0 // {0}: not a record the script knows (decoded as an error)
	replyOwned        = 1 // {1, attempt, record before the claim or ''}
	replyReplay       = 2 // {2, completed record[, record pttl]}
	replyInProgress   = 3 // {3, lease ms left}
	replyMismatch     = 4 // {4}
	replyLegacy       = 5 // {5}: a record in the previous format; run legacy.lua
	replyExpired      = 6 // {6, code, attempt}: only the tombstone is left
	replyLegacyReplay = 7 // {7, code, body}: legacy.lua's replay
)

// errLegacy says a claim met a record in the previous format, or legacy.lua
// found none left (attempt 0): Claim runs the other script.
var errLegacy = errors.New("redisstore: record in the previous format")

// claimReply is a decoded reply of claim.lua or legacy.lua.
type claimReply struct {
	code      int64
	attempt   int
	record    string // replyOwned: the record before the claim, or ""
	status    int
	body      []byte
	leaseLeft time.Duration
	ttl       time.Duration // replyReplay, when asked: how long the record lives
}

// decodeClaim checks the shape of a claim reply and decodes it. This is the
// one place where the scripts' status codes are read.
func decodeClaim(reply any) (*claimReply, error) {
	r, ok := reply.([]any)
	if !ok || len(r) == 0 {
		return nil, unexpected("claim", reply)
	}
	code, ok := r[0].(int64)
	if !ok {
		return nil, unexpected("claim", reply)
	}
	c := &claimReply{code: code}
	switch {
	case code == replyOwned && len(r) == 3:
		attempt, ok1 := r[1].(int64)
		rec, ok2 := r[2].(string)
		if !ok1 || !ok2 || attempt < 0 {
			break
		}
		if attempt == 0 { // legacy.lua: the record went meanwhile
			return &claimReply{code: replyLegacy}, nil
		}
		if rec != "" {
			if _, _, ok := parseStarted(rec); !ok {
				break
			}
		}
		c.attempt, c.record = int(attempt), rec
		return c, nil
	case code == replyReplay && (len(r) == 2 || len(r) == 3):
		rec, ok := r[1].(string)
		if !ok {
			break
		}
		if len(r) == 3 {
			ms, ok := r[2].(int64)
			if !ok {
				break
			}
			c.ttl = pttl(ms)
		}
		att, status, body, ok := parseCompleted(rec)
		if !ok {
			break
		}
		c.attempt, c.status, c.body = att, status, []byte(body)
		return c, nil
	case code == replyLegacyReplay && len(r) == 3:
		status, ok1 := r[1].(int64)
		body, ok2 := r[2].(string)
		if !ok1 || !ok2 {
			break
		}
		c.status, c.body = int(status), []byte(body)
		return c, nil
	case code == replyInProgress && len(r) == 2:
		ms, ok := r[1].(int64)
		if !ok {
			break
		}
		c.leaseLeft = time.Duration(max(ms, 0)) * time.Millisecond
		return c, nil
	case code == replyExpired && len(r) == 3:
		status, ok1 := r[1].(int64)
		att, ok2 := r[2].(int64)
		if !ok1 || !ok2 {
			break
		}
		c.status, c.attempt = int(status), int(att)
		return c, nil
	case (code == replyMismatch || code == replyLegacy) && len(r) == 1:
		return c, nil
	}
	return nil, unexpected("claim", reply)
}

// decodeOK maps the 1/0 reply of complete, release, extend and checkpoint.
func decodeOK(script string, reply any, err error) error {
	if err != nil {
		return fmt.Errorf("redisstore: %s: %w", script, err)
	}
	switch reply {
	case int64(1):
		return nil
	case int64(0):
		return ErrLeaseLost
	}
	return unexpected(script, reply)
}

// decodeReplicated is decodeOK for a write that waited for replicas: the
// script's own answer comes first, then the replicas'.
func decodeReplicated(script string, reply any, err error) error {
	var rerr *ReplicationError
	if errors.As(err, &rerr) {
		if derr := decodeOK(script, reply, nil); derr != nil {
			return derr
		}
		return rerr
	}
	return decodeOK(script, reply, err)
}

// decodeRecord maps lookup.lua's reply to a Record.
func decodeRecord(reply any) (*Record, error) {
	r, ok := reply.([]any)
	if !ok || len(r) != 3 {
		return nil, unexpected("lookup", reply)
	}
	ttl, ok1 := r[0].(int64)
	typ, ok2 := r[1].(string)
	v, ok3 := r[2].(string)
	if !ok1 || !ok2 || !ok3 {
		return nil, unexpected("lookup", reply)
	}
	switch typ {
	case "none":
		return nil, ErrNotFound
	case "hash":
		return nil, fmt.Errorf("%w: the record is in the format of idemkey before 0.2; it expires in %v", errLegacy, pttl(ttl))
	}
	var fp string
	if len(v) >= offFP+fpLen {
		fp = v[offFP : offFP+fpLen]
	}
	rec := &Record{TTL: pttl(ttl), Fingerprint: fp}
	if st, _, ok := parseStarted(v); ok {
		rec.State, rec.Attempt, rec.Label = Started, st.attempt, st.label
		rec.RecoveryPoint, rec.RecoveryData = st.recoveryPoint, st.recoveryData
		rec.CreatedAt = time.UnixMilli(st.createdMS)
		if v[1] != flagReleased {
			thr, _ := threshold(v)
			rec.LeaseTTL = pttl(ttl - thr)
		}
		return rec, nil
	}
	if att, code, body, ok := parseCompleted(v); ok {
		rec.State, rec.Attempt = Completed, att
		rec.Response = &Response{Code: code, Body: []byte(body)}
		return rec, nil
	}
	return nil, unexpected("lookup", reply)
}

// pttl turns a PTTL reply into a duration; "no key" and "no expiry" become 0.
func pttl(ms int64) time.Duration {
	return time.Duration(max(ms, 0)) * time.Millisecond
}

func unexpected(script string, reply any) error {
	s := fmt.Sprintf("%#v", reply)
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return fmt.Errorf("%w from %s: %s", ErrUnexpectedReply, script, s)
}
