package record

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
)

// Keys names the keys of one record: s is "<prefix>{<tag>}:lease", the
// record is s[:n]. Every key shares the record's hash tag, so every script
// on a record touches one cluster slot.
type Keys struct {
	s string
	n int
	// One is []string{the record}, the KEYS of most scripts, made once.
	One []string
}

// NewKeys returns the key names of the record of scope and key under
// prefix: tag = base64url(first 16 bytes of SHA-256(uvarint(len(scope)) ||
// scope || key)), so that no byte a client sends shapes a key name.
func NewKeys(prefix, scope, key string) Keys {
	var stack [256]byte
	b := binary.AppendUvarint(stack[:0], uint64(len(scope)))
	b = append(append(b, scope...), key...)
	sum := sha256.Sum256(b)

	const lease = ":lease"
	n := len(prefix) + 1 + 22 + 1
	var kstack [128]byte
	buf := kstack[:0]
	if n+len(lease) > len(kstack) {
		buf = make([]byte, 0, n+len(lease))
	}
	buf = append(buf, prefix...)
	buf = append(buf, '{')
	buf = base64.RawURLEncoding.AppendEncode(buf, sum[:16])
	buf = append(buf, '}')
	buf = append(buf, lease...)
	all := string(buf)
	return Keys{s: all, n: n, One: []string{all[:n]}}
}

// Record is the record's key: <prefix>{<tag>}.
func (k Keys) Record() string { return k.s[:k.n] }

// LegacyLease is the lease key of a record in the previous format.
func (k Keys) LegacyLease() string { return k.s }

// Channel is the record's wake-up channel (pub/sub, not a key).
func (k Keys) Channel() string { return k.s[:k.n] + ":w" }

// Tombstone is the key of the record's tombstone.
func (k Keys) Tombstone() string { return k.s[:k.n] + ":t" }

// What a key name under a prefix is, as NameKind tells.
const (
	NameOther       = iota // not a name the store writes
	NameRecord             // <prefix>{<tag>}
	NameTombstone          // <prefix>{<tag>}:t
	NameLegacyLease        // <prefix>{<tag>}:lease, of a record in the previous format
)

// tagLen is the length of a tag: 16 bytes in unpadded base64url.
const tagLen = 22

// NameKind tells what the key name is under prefix (one of the Name
// constants) and returns the keys of its record, for every kind but
// NameOther.
func NameKind(prefix, name string) (kind int, k Keys) {
	n := len(prefix) + 1 + tagLen + 1
	if len(name) < n || name[:len(prefix)] != prefix || name[len(prefix)] != '{' || name[n-1] != '}' {
		return NameOther, Keys{}
	}
	for _, c := range []byte(name[len(prefix)+1 : n-1]) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return NameOther, Keys{}
		}
	}
	switch name[n:] {
	case "":
		kind = NameRecord
	case ":t":
		kind = NameTombstone
	case ":lease":
		kind = NameLegacyLease
	default:
		return NameOther, Keys{}
	}
	all := name[:n] + ":lease"
	return kind, Keys{s: all, n: n, One: []string{all[:n]}}
}

// ParseName returns the keys of the record named name under prefix, or,
// when name is not a record's name, why not, in words for an operator.
func ParseName(prefix, name string) (k Keys, why string) {
	kind, k := NameKind(prefix, name)
	switch kind {
	case NameRecord:
		return k, ""
	case NameTombstone:
		return Keys{}, "it is a tombstone's; name its record, without the \":t\""
	case NameLegacyLease:
		return Keys{}, "it is the lease key of a record in the format before 0.2; name its record, without the \":lease\""
	}
	return Keys{}, "want the prefix, then a hash tag of 22 base64url characters in braces, as Scan and 'idemkey ls' show"
}
