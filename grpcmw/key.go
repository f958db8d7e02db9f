package grpcmw

import (
	"fmt"
	"strings"
)

// Metadata keys of the contract.
const (
	// MetadataKey is the request metadata that carries the idempotency key:
	// one value, a bare token or an RFC 8941 string of 1 to MaxKeyLen
	// visible ASCII characters, as the HTTP Idempotency-Key header.
	MetadataKey = "idempotency-key"

	// MetadataReplayed is the response header metadata with which the server
	// says that the answer is the stored outcome of an earlier execution
	// ("true").
	MetadataReplayed = "idempotency-replayed"
)

// MaxKeyLen is the longest idempotency key accepted, in characters: the
// limit of the HTTP middleware.
const MaxKeyLen = 255

// parseKey decodes a value of the idempotency-key metadata by the rule of
// the HTTP header: a bare token of visible ASCII characters without spaces,
// quotes, backslashes or commas (a comma is what a proxy makes of two
// values merged into one), or an RFC 8941 sf-string ("..." with \" and \\
// escapes, printable ASCII inside, commas included); both forms name the same key, so abc
// and "abc" are equal. Surrounding spaces and tabs are ignored; the key is
// 1 to MaxKeyLen characters. On failure it returns the reason, in words a
// client can act on. A test holds it to internal/httpcore's ParseKey.
func parseKey(v string) (key, reason string) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return "", "the key is empty"
	}
	if v[0] != '"' {
		for i := 0; i < len(v); i++ {
			switch c := v[i]; {
			case c <= ' ' || c >= 0x7f || c == '"' || c == '\\':
				return "", fmt.Sprintf("the key has a character other than visible ASCII at position %d (quote it as an RFC 8941 string to include spaces)", i+1)
			case c == ',':
				return "", fmt.Sprintf("the key has a comma at position %d: a bare key cannot hold one, as a comma is what an intermediary "+
					"puts between two Idempotency-Key fields it merges (quote the key as an RFC 8941 string to include a comma)", i+1)
			}
		}
		if len(v) > MaxKeyLen {
			return "", fmt.Sprintf("the key is %d characters long; the limit is %d", len(v), MaxKeyLen)
		}
		return v, ""
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", `the quoted key has a backslash not followed by " or \`
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", "the quoted key has characters after its closing quote"
			}
			switch k := b.String(); {
			case k == "":
				return "", "the key is empty"
			case len(k) > MaxKeyLen:
				return "", fmt.Sprintf("the key is %d characters long; the limit is %d", len(k), MaxKeyLen)
			default:
				return k, ""
			}
		case c < ' ' || c >= 0x7f:
			return "", fmt.Sprintf("the quoted key has a character other than printable ASCII at position %d", i+1)
		default:
			b.WriteByte(c)
		}
	}
	return "", "the quoted key has no closing quote"
}
