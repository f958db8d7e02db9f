package idemclient

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// HeaderKey is the request header that carries the idempotency key.
const HeaderKey = "Idempotency-Key"

// HeaderReplayed is the response header with which a server says that the
// response is the stored outcome of an earlier execution ("true").
const HeaderReplayed = "Idempotent-Replayed"

// MaxKeyLen is the longest key the Transport sends, in bytes: the limit of
// the idemkey middleware, and of Stripe.
const MaxKeyLen = 255

// KeyFormat is how the Transport writes a key it sets into the header.
type KeyFormat int

const (
	// FormatToken writes the key as it is: Idempotency-Key: 0190b5e4-….
	// This is what Stripe's clients send, and what most servers expect.
	FormatToken KeyFormat = iota
	// FormatString writes the key as an RFC 8941 sf-string, in double
	// quotes with \" and \\ escaped: Idempotency-Key: "0190b5e4-…". This is
	// the form the IETF httpapi idempotency-key draft specifies; the idemkey
	// middleware accepts both.
	FormatString
)

// String returns "token" or "string".
func (f KeyFormat) String() string {
	switch f {
	case FormatToken:
		return "token"
	case FormatString:
		return "string"
	}
	return fmt.Sprintf("KeyFormat(%d)", int(f))
}

// NewKey returns a fresh UUIDv7 (RFC 9562): 48 bits of Unix time in
// milliseconds, then 74 random bits from crypto/rand, in the usual
// 8-4-4-4-12 lower-case hex form. Keys minted later sort later (to the
// millisecond), which keeps them cheap to index and easy to read in logs.
// It is safe for concurrent use.
func NewKey() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMilli())<<16)
	_, _ = rand.Read(b[6:]) // never fails (crypto/rand, Go 1.24+)
	b[6] = 0x70 | b[6]&0x0f // version 7
	b[8] = 0x80 | b[8]&0x3f // variant 10
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], b[10:16])
	return string(s[:])
}

type keyCtx struct{}

// WithKey returns a copy of ctx that pins the idempotency key of the
// requests made with it: the Transport sends key instead of minting one.
// Use it for an operation that must keep its key beyond one RoundTrip —
// across a restart of the process (store the key with the job, then pin it
// when the job resumes), or across 307/308 redirects, which http.Client
// sends as new requests. Every keyed request made with the context gets the
// same key, so pin one per logical operation.
//
// The key must be 1 to MaxKeyLen bytes of printable ASCII; with
// FormatToken it may not contain spaces, double quotes, backslashes or
// commas (a server takes a comma for two merged keys). A
// key that breaks these rules makes RoundTrip fail with ErrInvalidKey
// before anything is sent.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// keyFrom returns the key pinned in ctx by WithKey, if any.
func keyFrom(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(keyCtx{}).(string)
	return k, ok
}

// checkKey reports what is wrong with key in format, or nil.
func checkKey(key string, format KeyFormat) error {
	if key == "" {
		return fmt.Errorf("%w: the key is empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: the key is %d bytes long; the limit is %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c < ' ' || c > '~' {
			return fmt.Errorf("%w: byte %d of the key is not printable ASCII", ErrInvalidKey, i+1)
		}
		if format == FormatToken && (c == ' ' || c == '"' || c == '\\' || c == ',') {
			return fmt.Errorf("%w: byte %d of the key is a space, quote, backslash or comma, which a bare token cannot carry (use FormatString)", ErrInvalidKey, i+1)
		}
	}
	return nil
}

// encodeKey writes key as a header value in format.
func encodeKey(key string, format KeyFormat) string {
	if format != FormatString {
		return key
	}
	var b strings.Builder
	b.Grow(len(key) + 2)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		if c := key[i]; c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(key[i])
	}
	b.WriteByte('"')
	return b.String()
}

// callerKeys returns the idempotency key values the caller set, under any
// spelling of the header name.
func callerKeys(h http.Header) []string {
	var vals []string
	for name, v := range h {
		if strings.EqualFold(name, HeaderKey) {
			vals = append(vals, v...)
		}
	}
	return vals
}
