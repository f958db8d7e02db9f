package redisstore

import (
	"crypto/sha256"
	"strconv"
	"strings"
)

// The record is one Redis string. Its layout is the table in package lua's
// doc (lua/lua.go), which the scripts' header comments follow too; the
// offsets here are 0-based, the table's are Lua's 1-based ones.
const (
	kindStarted   = 'S'
	kindCompleted = 'C'
	flagNone      = '-'
	flagReleased  = 'r' // a started record whose lease was given back

	fpLen    = 16
	tokenLen = 8

	offFP            = 2
	offToken         = offFP + fpLen       // started records only
	offStartedTail   = offToken + tokenLen // "<attempt>:<threshold>:" then the tail
	offCompletedTail = offFP + fpLen       // "<attempt>:<code>:" then the outcome
	maxTombstoneCode = 1023                // a tombstone keeps codes 0 to 1023
	tombstoneFPShift = 1 << 18             // fingerprint bits above code and attempt
	tombstoneMaxAtt  = 255                 // attempts above are kept as 255
)

// storedFingerprint is what a record keeps of a request's fingerprint: a
// 16-byte fingerprint as it is, any other the first 16 bytes of its SHA-256.
func storedFingerprint(fp string) (out [fpLen]byte) {
	if len(fp) == fpLen {
		copy(out[:], fp)
		return out
	}
	sum := sha256.Sum256([]byte(fp))
	copy(out[:], sum[:fpLen])
	return out
}

// started is the content of a started record that Go reads and writes: the
// scripts only read the header and the attempt and threshold.
type started struct {
	attempt       int
	recoveryPoint string
	recoveryData  []byte
	label         string
	createdMS     int64
}

// appendStarted appends a started record.
//
//	S <flags> <fp:16> <token:8> <attempt>:<threshold>:<rp netstring><rpd netstring><label netstring><created ms>
func appendStarted(dst []byte, fp *[fpLen]byte, token, threshold string, r *started) []byte {
	dst = append(dst, kindStarted, flagNone)
	dst = append(dst, fp[:]...)
	dst = append(dst, token...)
	dst = strconv.AppendInt(dst, int64(r.attempt), 10)
	dst = append(dst, ':')
	dst = append(dst, threshold...)
	dst = append(dst, ':')
	dst = appendNetstring(dst, r.recoveryPoint)
	dst = appendNetstring(dst, string(r.recoveryData))
	dst = appendNetstring(dst, r.label)
	return strconv.AppendInt(dst, r.createdMS, 10)
}

// appendCompleted appends a completed record.
//
//	C - <fp:16> <attempt>:<code>:<outcome>
func appendCompleted(dst []byte, fp *[fpLen]byte, attempt, code int, body []byte) []byte {
	dst = append(dst, kindCompleted, flagNone)
	dst = append(dst, fp[:]...)
	dst = strconv.AppendInt(dst, int64(attempt), 10)
	dst = append(dst, ':')
	dst = strconv.AppendInt(dst, int64(code), 10)
	dst = append(dst, ':')
	return append(dst, body...)
}

// tombstone packs what a tombstone keeps into one integer, which Redis stores
// in no more than its object header: 32 bits of fingerprint, the code (0 to
// 1023) and the attempt count (capped at 255). It fits in 50 bits, so the
// claim script decodes it exactly with Lua's doubles.
func tombstone(fp *[fpLen]byte, code, attempt int) string {
	f := int64(fp[0])<<24 | int64(fp[1])<<16 | int64(fp[2])<<8 | int64(fp[3])
	if code < 0 || code > maxTombstoneCode {
		code = 0
	}
	return strconv.FormatInt(f*tombstoneFPShift+int64(code)<<8+int64(min(attempt, tombstoneMaxAtt)), 10)
}

// parseStarted decodes a started record; ok is false if v is not one.
func parseStarted(v string) (r started, token string, ok bool) {
	if len(v) < offStartedTail || v[0] != kindStarted {
		return r, "", false
	}
	token = v[offToken:offStartedTail]
	rest := v[offStartedTail:]
	var att int64
	if att, rest, ok = decimal(rest); !ok {
		return r, "", false
	}
	if _, rest, ok = decimal(rest); !ok { // the threshold: the scripts' business
		return r, "", false
	}
	r.attempt = int(att)
	var data string
	if r.recoveryPoint, rest, ok = netstring(rest); !ok {
		return r, "", false
	}
	if data, rest, ok = netstring(rest); !ok {
		return r, "", false
	}
	if r.recoveryPoint != "" {
		r.recoveryData = []byte(data)
	}
	if r.label, rest, ok = netstring(rest); !ok {
		return r, "", false
	}
	if r.createdMS, ok = integer(rest); !ok {
		return r, "", false
	}
	return r, token, true
}

// parseCompleted decodes a completed record; ok is false if v is not one.
func parseCompleted(v string) (attempt, code int, body string, ok bool) {
	if len(v) < offCompletedTail || v[0] != kindCompleted {
		return 0, 0, "", false
	}
	rest := v[offCompletedTail:]
	var a, c int64
	if a, rest, ok = decimal(rest); !ok {
		return 0, 0, "", false
	}
	if c, rest, ok = decimal(rest); !ok {
		return 0, 0, "", false
	}
	return int(a), int(c), rest, true
}

// threshold returns the threshold of a started record: its PTTL while the
// lease is held stays above it.
func threshold(v string) (int64, bool) {
	if len(v) < offStartedTail || v[0] != kindStarted {
		return 0, false
	}
	_, rest, ok := decimal(v[offStartedTail:])
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
