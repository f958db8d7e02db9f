// Package spec reads idemkey's records in Redis by the names of the storage
// specification, docs/spec.md (version redisstore.SpecVersion): a record
// field by field, and a tombstone. It is what 'idemkey inspect --raw'
// prints, and what a reader written in another language must agree with
// (the golden vectors in testdata/spec hold both to the same bytes).
//
// It decodes only, with the same decoders package redisstore uses; the
// store writes. A record of a version this package does not know is
// refused (ErrUnknownVersion), never guessed at. Its functions are pure and
// safe for concurrent use.
package spec

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/idemkey/idemkey/redisstore/internal/record"
)

// The errors ParseRecord and ParseTombstone return. Both are refusals: a
// reader must not act on a value it cannot read.
var (
	// ErrUnknownVersion means the value is not a record of any version this
	// reader knows: its first byte is not one of Spec 1's kinds ('S', 'C').
	// It may be a record of a later major version, or not a record at all.
	ErrUnknownVersion = errors.New("spec: not a record of a version this reader knows")

	// ErrMalformed means the value starts as a record of this version but
	// does not follow its layout (truncated, a number that is not one, a
	// netstring past the end).
	ErrMalformed = errors.New("spec: malformed record")
)

// The kinds of Spec 1 records, their first byte.
const (
	KindStarted   = "S"
	KindCompleted = "C"
)

// Record is one record's value, field by field, by the specification's
// names. Fields of the other kind are zero.
type Record struct {
	// Kind is "S" (started) or "C" (completed).
	Kind string
	// Flags is the flags byte: "-" none, "w" waited for, "r" released; a
	// reader ignores flags it does not know.
	Flags byte
	// Fingerprint is the stored fingerprint, 16 bytes.
	Fingerprint []byte
	// Attempt is 1, plus one per takeover.
	Attempt int64

	// Token is the owner's fencing token, 8 bytes (started).
	Token []byte
	// Threshold is the retention minus the lease, in milliseconds: the lease
	// is held while the record's PTTL is above it (started).
	Threshold int64
	// RecoveryPoint and RecoveryData are the last checkpoint, as stored;
	// RecoveryData means nothing when RecoveryPoint is empty (started).
	RecoveryPoint, RecoveryData []byte
	// Label is the request's label (started).
	Label []byte
	// Created is the first claim's time in Unix milliseconds, by the
	// claiming process's clock; 0 when not known (started).
	Created int64

	// Code is the outcome's code (completed).
	Code int64
	// Outcome is the stored outcome's bytes (completed).
	Outcome []byte
}

// State is "completed", "released" (a started record with flags "r") or
// "started".
func (r *Record) State() string {
	switch {
	case r.Kind == KindCompleted:
		return "completed"
	case r.Flags == record.FlagReleased:
		return "released"
	}
	return "started"
}

// ParseRecord decodes a record's value. It returns ErrUnknownVersion for a
// value whose first byte is not a kind of Spec 1, and ErrMalformed for one
// that does not follow its kind's layout.
func ParseRecord(v []byte) (*Record, error) {
	if len(v) == 0 || (v[0] != record.KindStarted && v[0] != record.KindCompleted) {
		return nil, ErrUnknownVersion
	}
	s := string(v)
	if len(s) < record.OffFP+record.FPLen {
		return nil, ErrMalformed
	}
	r := &Record{Kind: s[:1], Flags: v[1], Fingerprint: []byte(s[record.OffFP : record.OffFP+record.FPLen])}
	if r.Kind == KindCompleted {
		att, code, body, ok := record.ParseCompleted(s)
		if !ok {
			return nil, ErrMalformed
		}
		r.Attempt, r.Code = int64(att), int64(code)
		r.Outcome = []byte(body)
		return r, nil
	}
	f, ok := record.ParseStartedFields(s)
	if !ok {
		return nil, ErrMalformed
	}
	r.Token, r.Attempt, r.Threshold, r.Created = []byte(f.Token), f.Attempt, f.Threshold, f.CreatedMS
	r.RecoveryPoint, r.RecoveryData, r.Label = []byte(f.RecoveryPoint), []byte(f.RecoveryData), []byte(f.Label)
	return r, nil
}

// MarshalJSON writes the record as one JSON object with the
// specification's field names, and the derived "state": bytes as a string
// when they are UTF-8, else as {"hex": "..."}; the fingerprint and token
// in hex.
func (r *Record) MarshalJSON() ([]byte, error) {
	o := newObject()
	o.add("kind", r.Kind)
	o.add("state", r.State())
	o.add("flags", Bytes([]byte{r.Flags}))
	o.add("fingerprint", hex.EncodeToString(r.Fingerprint))
	if r.Kind == KindCompleted {
		o.add("attempt", r.Attempt)
		o.add("code", r.Code)
		o.add("outcome", Bytes(r.Outcome))
		return o.bytes()
	}
	o.add("token", hex.EncodeToString(r.Token))
	o.add("attempt", r.Attempt)
	o.add("threshold", r.Threshold)
	o.add("recovery_point", Bytes(r.RecoveryPoint))
	o.add("recovery_data", Bytes(r.RecoveryData))
	o.add("label", Bytes(r.Label))
	o.add("created", r.Created)
	return o.bytes()
}

// Tombstone is a tombstone's value, by the specification's names.
type Tombstone struct {
	// Fingerprint32 is the first 4 bytes of the record's fingerprint.
	Fingerprint32 [4]byte
	// Code is the outcome's code, or 0 if it was outside 0 to 1023.
	Code int
	// Attempt is how many attempts ran, capped at 255.
	Attempt int
}

// ParseTombstone decodes a tombstone's value, a decimal integer below
// 2^50; it returns ErrMalformed for anything else.
func ParseTombstone(v []byte) (*Tombstone, error) {
	fp32, code, att, ok := record.ParseTombstone(string(v))
	if !ok {
		return nil, ErrMalformed
	}
	t := &Tombstone{Code: code, Attempt: att}
	t.Fingerprint32 = [4]byte{byte(fp32 >> 24), byte(fp32 >> 16), byte(fp32 >> 8), byte(fp32)}
	return t, nil
}

// MarshalJSON writes the tombstone with the specification's field names.
func (t *Tombstone) MarshalJSON() ([]byte, error) {
	o := newObject()
	o.add("fingerprint32", hex.EncodeToString(t.Fingerprint32[:]))
	o.add("code", t.Code)
	o.add("attempt", t.Attempt)
	return o.bytes()
}

// Bytes are bytes as the specification's JSON views write them: a string
// when they are valid UTF-8, else {"hex": "..."}.
type Bytes []byte

// MarshalJSON writes b as a string when it is valid UTF-8, else as
// {"hex": "..."}. HTML characters are not escaped.
func (b Bytes) MarshalJSON() ([]byte, error) {
	if utf8.Valid(b) {
		return marshal(string(b))
	}
	return marshal(map[string]string{"hex": hex.EncodeToString(b)})
}

// UnmarshalJSON reads what MarshalJSON writes: a string, or {"hex": "..."}.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		*b = Bytes(s)
		return nil
	}
	var h struct {
		Hex *string `json:"hex"`
	}
	if err := json.Unmarshal(data, &h); err != nil || h.Hex == nil {
		return errors.New("spec: bytes are a string or {\"hex\": \"...\"}")
	}
	d, err := hex.DecodeString(*h.Hex)
	if err != nil {
		return fmt.Errorf("spec: bytes: %w", err)
	}
	*b = d
	return nil
}

// object is a JSON object that keeps its members in order.
type object struct{ buf []byte }

func newObject() *object { return &object{buf: []byte{'{'}} }

func (o *object) add(name string, v any) {
	if len(o.buf) > 1 {
		o.buf = append(o.buf, ',')
	}
	k, _ := marshal(name)
	o.buf = append(append(o.buf, k...), ':')
	b, err := marshal(v)
	if err != nil {
		b = []byte("null")
	}
	o.buf = append(o.buf, b...)
}

func (o *object) bytes() ([]byte, error) { return append(o.buf, '}'), nil }

// marshal is json.Marshal without HTML escaping.
func marshal(v any) ([]byte, error) {
	if b, ok := v.(Bytes); ok {
		return b.MarshalJSON()
	}
	var buf jsonBuffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.b[:len(buf.b)-1], nil // without Encode's newline
}

type jsonBuffer struct{ b []byte }

func (j *jsonBuffer) Write(p []byte) (int, error) { j.b = append(j.b, p...); return len(p), nil }
