package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkey/idemkey/redisstore/internal/check"
	"github.com/idemkey/idemkey/redisstore/internal/record"
	"github.com/idemkey/idemkey/redisstore/internal/walk"
)

// This file is where what the internal packages return (the runner's
// replies and errors, the codec's plain structs and status codes) becomes
// the package's results and errors; forget.go maps forget's reply itself.

// errLegacy says a claim met a record in the previous format, or legacy.lua
// found none left (attempt 0): Claim runs the other script.
var errLegacy = errors.New("redisstore: record in the previous format")

// notReplicated is the runner's error for a write too few replicas
// acknowledged.
func notReplicated(acked, want int) error { return &ReplicationError{Acked: acked, Want: want} }

// claimed turns a claim's reply into a Claim, and gives the key back when
// the claim may have taken effect but cannot be used.
func (s *Store) claimed(l *Lease, reply any, err error, sent time.Time) (*Claim, error) {
	var notRepl error
	switch {
	case errors.Is(err, ErrNotReplicated):
		notRepl = err
	case err != nil && reply != nil:
		// The script ran but the WAIT after it failed: the claim is held and
		// cannot be trusted. Give it back.
		l.handBack()
		return nil, fmt.Errorf("redisstore: claim: %w", err)
	case err != nil:
		return nil, fmt.Errorf("redisstore: claim: %w", err)
	}
	r, ok := record.DecodeClaim(reply)
	if !ok {
		return nil, unexpected("claim", reply)
	}
	switch r.Status {
	case record.Replay, record.LegacyReplay:
		resp := Response{Code: r.Code, Body: r.Body}
		if r.TTL > 0 {
			s.remember(l, resp, sent.Add(r.TTL))
		}
		return &Claim{Status: Replayed, Response: resp}, nil
	case record.InProgress:
		return nil, &InProgressError{LeaseLeft: r.LeaseLeft}
	case record.Mismatch:
		return nil, ErrMismatch
	case record.Expired:
		return nil, &ExpiredError{Code: r.Code, Attempts: r.Attempt}
	case record.Legacy:
		return nil, errLegacy
	}
	l.Attempt = r.Attempt
	l.sign.Set(sent)
	if r.Record != "" {
		prev, _, _ := record.ParseStarted(r.Record)
		l.RecoveryPoint, l.RecoveryData = prev.RecoveryPoint, prev.RecoveryData
		l.label, l.createdMS = prev.Label, prev.CreatedMS
	}
	if notRepl != nil {
		// Nothing has run yet: give the key back rather than run on a claim
		// a failover could forget.
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.Lease)
		defer cancel()
		_ = l.Release(ctx)
		return nil, notRepl
	}
	st := Claimed
	if l.Attempt > 1 {
		st = TookOver
	}
	return &Claim{Status: st, Lease: l}, nil
}

// owned maps the reply of complete, release, extend and checkpoint: nil
// when the lease owned the record, else ErrLeaseLost.
func owned(script string, reply any, err error) error {
	if err != nil {
		return fmt.Errorf("redisstore: %s: %w", script, err)
	}
	owns, ok := record.DecodeOwned(reply)
	switch {
	case !ok:
		return unexpected(script, reply)
	case !owns:
		return ErrLeaseLost
	}
	return nil
}

// ownedReplicated is owned for a write that waited for replicas: the
// script's own answer comes first, then the replicas'.
func ownedReplicated(script string, reply any, err error) error {
	var rerr *ReplicationError
	if errors.As(err, &rerr) {
		if derr := owned(script, reply, nil); derr != nil {
			return derr
		}
		return rerr
	}
	return owned(script, reply, err)
}

// found maps lookup.lua's reply to a Record.
func found(reply any) (*Record, error) {
	f, ok := record.DecodeLookup(reply)
	switch {
	case !ok:
		return nil, unexpected("lookup", reply)
	case f.Type == "none":
		return nil, ErrNotFound
	case f.Type == "hash":
		return nil, fmt.Errorf("%w: the record is in the format of idemkey before 0.2; it expires in %v", errLegacy, f.TTL)
	}
	return recordOf(&f), nil
}

// recordOf maps a decoded record.
func recordOf(f *record.Found) *Record {
	rec := &Record{State: State(f.State()), TTL: f.TTL, Fingerprint: f.Fingerprint, LeaseTTL: f.LeaseTTL}
	if f.Completed {
		rec.Attempt, rec.Response = f.Attempt, &Response{Code: f.Code, Body: []byte(f.Body)}
		return rec
	}
	st := f.Started
	rec.Attempt, rec.Label, rec.RecoveryPoint, rec.RecoveryData = st.Attempt, st.Label, st.RecoveryPoint, st.RecoveryData
	if st.CreatedMS > 0 { // 0: not known (a record migrated from the format before 0.2)
		rec.CreatedAt = time.UnixMilli(st.CreatedMS)
	}
	return rec
}

// scanned maps a key Scan read: a completed record's body only when asked
// for and read whole.
func scanned(k *walk.Key, bodies bool) *Scanned {
	out := &Scanned{Name: k.Name, Server: k.Server, Problem: k.Problem}
	if k.Found != nil {
		out.Record = recordOf(k.Found)
		if out.Record.Response != nil && (!bodies || !k.Whole) {
			out.Record.Response.Body = nil
		}
	}
	return out
}

// unexpected is ErrUnexpectedReply for script's reply.
func unexpected(script string, reply any) error {
	return fmt.Errorf("%w from %s: %s", ErrUnexpectedReply, script, record.Show(reply))
}

// checkResults maps the deployment checks' results.
func checkResults(rs []check.Result) []CheckResult {
	out := make([]CheckResult, len(rs))
	for i, r := range rs {
		out[i] = CheckResult{Name: r.Name, Status: CheckStatus(r.Status), Message: r.Message}
	}
	return out
}
