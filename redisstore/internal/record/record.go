// Package record is the byte format of idemkey's records in Redis, as pure
// functions: the record's two layouts, the tombstone, the names of a
// record's keys, and the decoders of the scripts' replies. It is the Go twin
// of the table in package lua's doc (lua/lua.go), which the scripts' header
// comments follow too; the offsets here are 0-based, the table's are Lua's
// 1-based ones:
//
//	offset  field       started record                     completed record
//	0       kind        'S'                                'C'
//	1       flags       '-'; 'w': waited for; 'r': released  '-'
//	2-17    fp          16 bytes: the stored fingerprint
//	18-25   token       8 bytes: the owner's fencing token  -
//	26-     (started)   <attempt>:<threshold>:<rp><rpd><label><created>
//	18-     (completed) <attempt>:<code>:<outcome>
//
// rp, rpd and label are netstrings (<length>:<bytes>); numbers are decimal
// ASCII, the code signed; the outcome runs to the end. docs/spec.md
// specifies them (Spec 1.0), and the golden vectors of testdata/spec hold
// these functions to it (redisstore/spec TestVectorsDecode and
// TestVectorsReencode).
//
// It knows nothing of package redisstore: decoders return plain structs and
// report a reply they do not know with ok == false, and redisstore maps
// them to its public types and errors.
package record

import (
	"crypto/rand"
	"crypto/sha256"
	"strconv"
	"strings"
)

// The layout's constants.
const (
	KindStarted   = 'S'
	KindCompleted = 'C'
	FlagNone      = '-'
	FlagReleased  = 'r' // a started record whose lease was given back

	FPLen    = 16 // bytes of a stored fingerprint
	TokenLen = 8  // bytes of a fencing token

	OffFP            = 2
	OffToken         = OffFP + FPLen       // started records only
	OffStartedTail   = OffToken + TokenLen // "<attempt>:<threshold>:" then the tail
	OffCompletedTail = OffFP + FPLen       // "<attempt>:<code>:" then the outcome

	maxTombstoneCode = 1023    // a tombstone keeps codes 0 to 1023
	tombstoneFPShift = 1 << 18 // fingerprint bits above code and attempt
	tombstoneMaxAtt  = 255     // attempts above are kept as 255
)

// Fingerprint is what a record keeps of a request's fingerprint: a 16-byte
// fingerprint as it is, any other the first 16 bytes of its SHA-256.
func Fingerprint(fp string) (out [FPLen]byte) {
	if len(fp) == FPLen {
		copy(out[:], fp)
		return out
	}
	sum := sha256.Sum256([]byte(fp))
	copy(out[:], sum[:FPLen])
	return out
}

// Started is the content of a started record that Go reads and writes: the
// scripts only read the header and the attempt and threshold.
type Started struct {
	Attempt       int
	RecoveryPoint string
	RecoveryData  []byte // nil unless RecoveryPoint is set, once parsed
	Label         string
	CreatedMS     int64 // the first claim's time, Unix milliseconds
}

// NewToken returns a fencing token: 8 random bytes.
func NewToken() string {
	var b [TokenLen]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return string(b[:])
}

// AppendStarted appends a started record.
//
//	S <flags> <fp:16> <token:8> <attempt>:<threshold>:<rp netstring><rpd netstring><label netstring><created ms>
func AppendStarted(dst []byte, fp *[FPLen]byte, token, threshold string, r *Started) []byte {
	dst = append(dst, KindStarted, FlagNone)
	dst = append(dst, fp[:]...)
	dst = append(dst, token...)
	dst = strconv.AppendInt(dst, int64(r.Attempt), 10)
	dst = append(dst, ':')
	dst = append(dst, threshold...)
	dst = append(dst, ':')
	dst = appendNetstring(dst, r.RecoveryPoint)
	dst = appendNetstring(dst, string(r.RecoveryData))
	dst = appendNetstring(dst, r.Label)
	return strconv.AppendInt(dst, max(r.CreatedMS, 0), 10) // a clock before 1970: 0, not known
}

// AppendCompleted appends a completed record.
//
//	C - <fp:16> <attempt>:<code>:<outcome>
func AppendCompleted(dst []byte, fp *[FPLen]byte, attempt, code int, body []byte) []byte {
	dst = append(dst, KindCompleted, FlagNone)
	dst = append(dst, fp[:]...)
	dst = strconv.AppendInt(dst, int64(attempt), 10)
	dst = append(dst, ':')
	dst = strconv.AppendInt(dst, int64(code), 10)
	dst = append(dst, ':')
	return append(dst, body...)
}

// Tombstone packs what a tombstone keeps into one integer, which Redis
// stores in no more than its object header: 32 bits of fingerprint, the code
// (0 to 1023, any other kept as 0) and the attempt count (capped at 255). It
// fits in 50 bits, so the claim script decodes it exactly with Lua's doubles.
func Tombstone(fp *[FPLen]byte, code, attempt int) string {
	f := int64(fp[0])<<24 | int64(fp[1])<<16 | int64(fp[2])<<8 | int64(fp[3])
	if code < 0 || code > maxTombstoneCode {
		code = 0
	}
	return strconv.FormatInt(f*tombstoneFPShift+int64(code)<<8+int64(min(attempt, tombstoneMaxAtt)), 10)
}

// ParseStarted decodes a started record; ok is false if v is not one.
// RecoveryData is nil when the recovery point is empty, whatever was
// stored (see StartedFields).
func ParseStarted(v string) (r Started, token string, ok bool) {
	f, ok := ParseStartedFields(v)
	if !ok {
		return r, "", false
	}
	r = Started{Attempt: int(f.Attempt), RecoveryPoint: f.RecoveryPoint, Label: f.Label, CreatedMS: f.CreatedMS}
	if r.RecoveryPoint != "" {
		r.RecoveryData = []byte(f.RecoveryData)
	}
	return r, f.Token, true
}

// StartedFields are a started record's fields as stored, before what
// ParseStarted makes of them.
type StartedFields struct {
	Token                              string
	Attempt, Threshold                 int64
	RecoveryPoint, RecoveryData, Label string
	CreatedMS                          int64
}

// ParseStartedFields decodes a started record's fields; ok is false if v
// is not one.
func ParseStartedFields(v string) (f StartedFields, ok bool) {
	if len(v) < OffStartedTail || v[0] != KindStarted {
		return f, false
	}
	f.Token = v[OffToken:OffStartedTail]
	rest := v[OffStartedTail:]
	if f.Attempt, rest, ok = decimal(rest); !ok {
		return StartedFields{}, false
	}
	if f.Threshold, rest, ok = decimal(rest); !ok {
		return StartedFields{}, false
	}
	if f.RecoveryPoint, rest, ok = netstring(rest); !ok {
		return StartedFields{}, false
	}
	if f.RecoveryData, rest, ok = netstring(rest); !ok {
		return StartedFields{}, false
	}
	if f.Label, rest, ok = netstring(rest); !ok {
		return StartedFields{}, false
	}
	if f.CreatedMS, ok = integer(rest); !ok {
		return StartedFields{}, false
	}
	return f, true
}

// ParseCompleted decodes a completed record; ok is false if v is not one.
func ParseCompleted(v string) (attempt, code int, body string, ok bool) {
	if len(v) < OffCompletedTail || v[0] != KindCompleted {
		return 0, 0, "", false
	}
	rest := v[OffCompletedTail:]
	var a, c int64
	if a, rest, ok = decimal(rest); !ok {
		return 0, 0, "", false
	}
	if c, rest, ok = signedDecimal(rest); !ok {
		return 0, 0, "", false
	}
	return int(a), int(c), rest, true
}

// Threshold returns the threshold of a started record, or of its first
// bytes: its PTTL while the lease is held stays above it.
func Threshold(v string) (int64, bool) {
	if len(v) < OffStartedTail || v[0] != KindStarted {
		return 0, false
	}
	_, rest, ok := decimal(v[OffStartedTail:])
	if !ok {
		return 0, false
	}
	t, _, ok := decimal(rest)
	return t, ok
}

func appendNetstring(dst []byte, s string) []byte {
	dst = strconv.AppendInt(dst, int64(len(s)), 10)
	dst = append(dst, ':')
	return append(dst, s...)
}

// decimal reads "<digits>:" from the start of s.
func decimal(s string) (n int64, rest string, ok bool) {
	i := strings.IndexByte(s, ':')
	if i <= 0 || i > 19 {
		return 0, "", false
	}
	n, ok = integer(s[:i])
	return n, s[i+1:], ok
}

// signedDecimal reads "<digits>:" or "-<digits>:" from the start of s: any
// int64, as strconv.AppendInt writes it (the code of a completed record is
// any int a caller gave).
func signedDecimal(s string) (n int64, rest string, ok bool) {
	if s == "" || s[0] != '-' {
		return decimal(s)
	}
	i := strings.IndexByte(s, ':')
	if i <= 1 || i > 20 {
		return 0, "", false
	}
	if s[1:i] == "9223372036854775808" { // math.MinInt64, whose magnitude is no int64
		return -1 << 63, s[i+1:], true
	}
	n, ok = integer(s[1:i])
	return -n, s[i+1:], ok
}

// integer parses a non-negative decimal integer of at most 19 digits.
func integer(s string) (int64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, n >= 0
}

// netstring reads "<len>:<bytes>" from the start of s.
func netstring(s string) (field, rest string, ok bool) {
	n, rest, ok := decimal(s)
	if !ok || n > int64(len(rest)) {
		return "", "", false
	}
	return rest[:n], rest[n:], true
}

// ParseTombstone decodes a tombstone (see Tombstone): the first 4 bytes of
// the fingerprint as a big-endian integer, the code and the attempt count;
// ok is false if v is not one, a decimal integer below 2^50.
func ParseTombstone(v string) (fp32 uint32, code, attempt int, ok bool) {
	n, ok := integer(v)
	if !ok || n >= 1<<50 {
		return 0, 0, 0, false
	}
	return uint32(n / tombstoneFPShift), int(n>>8) & maxTombstoneCode, int(n & tombstoneMaxAtt), true
}
