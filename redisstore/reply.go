package redisstore

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Reply status codes of claim.lua; keep the two in step.
const (
	replyOwned      = 1 // {1, attempt, recovery point, recovery data}
	replyReplay     = 2 // {2, code, body}
	replyInProgress = 3 // {3, lease pttl}
	replyMismatch   = 4 // {4}
)

// decodeClaim maps claim.lua's reply to a Claim or an error. This is the one
// place where the script's status codes become Go results. For an owned
// record the Claim's Lease carries only Attempt and the recovery point; the
// caller fills in the rest.
func decodeClaim(reply any) (*Claim, error) {
	r, ok := reply.([]any)
	if !ok || len(r) == 0 {
		return nil, unexpected("claim", reply)
	}
	code, ok := r[0].(int64)
	if !ok {
		return nil, unexpected("claim", reply)
	}
	switch {
	case code == replyOwned && len(r) == 4:
		attempt, ok1 := r[1].(int64)
		point, ok2 := r[2].(string)
		data, ok3 := r[3].(string)
		if !ok1 || !ok2 || !ok3 || attempt < 1 {
			break
		}
		st := Claimed
		if attempt > 1 {
			st = TookOver
		}
		l := &Lease{Attempt: int(attempt), RecoveryPoint: point}
		if point != "" {
			l.RecoveryData = []byte(data)
		}
		return &Claim{Status: st, Lease: l}, nil
	case code == replyReplay && len(r) == 3:
		status, ok1 := r[1].(int64)
		body, ok2 := r[2].(string)
		if !ok1 || !ok2 {
			break
		}
		return &Claim{Status: Replayed, Response: Response{Code: int(status), Body: []byte(body)}}, nil
	case code == replyInProgress && len(r) == 2:
		ms, ok := r[1].(int64)
		if !ok {
			break
		}
		return nil, &InProgressError{LeaseLeft: time.Duration(max(ms, 0)) * time.Millisecond}
	case code == replyMismatch && len(r) == 1:
		return nil, ErrMismatch
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
func decodeRecord(r []any) (*Record, error) {
	if len(r) < 2 || len(r)%2 != 0 {
		return nil, unexpected("lookup", r)
	}
	ttl, ok1 := r[0].(int64)
	leaseTTL, ok2 := r[1].(int64)
	if !ok1 || !ok2 {
		return nil, unexpected("lookup", r)
	}
	if ttl == -2 || len(r) == 2 {
		return nil, ErrNotFound
	}
	rec := &Record{TTL: pttl(ttl), LeaseTTL: pttl(leaseTTL)}
	var code, body string
	for i := 2; i < len(r); i += 2 {
		k, ok1 := r[i].(string)
		v, ok2 := r[i+1].(string)
		if !ok1 || !ok2 {
			return nil, unexpected("lookup", r)
		}
		switch k {
		case "state":
			rec.State = State(v)
		case "fp":
			rec.Fingerprint = v
		case "meta":
			if !unpackMeta([]byte(v), rec) {
				return nil, unexpected("lookup", r)
			}
		case "att":
			rec.Attempt, _ = strconv.Atoi(v)
		case "rp":
			rec.RecoveryPoint = v
		case "rpd":
			rec.RecoveryData = []byte(v)
		case "code":
			code = v
		case "resp":
			body = v
		}
	}
	if rec.State == Completed {
		c, _ := strconv.Atoi(code)
		rec.Response = &Response{Code: c, Body: []byte(body)}
	}
	return rec, nil
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
