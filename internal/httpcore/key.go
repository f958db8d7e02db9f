package httpcore

import (
	"errors"
	"fmt"
	"strings"
)

// MaxKeyLen is the longest idempotency key accepted, in characters.
const MaxKeyLen = 255

// ErrKey matches every error ParseKey returns (errors.Is).
var ErrKey = errors.New("malformed idempotency key")

// KeyError is the error ParseKey returns: why the key is malformed.
type KeyError struct {
	// Reason says what is wrong, in words a client can act on, such as
	// "the key is 300 characters long; the limit is 255".
	Reason string
}

// Error returns "malformed idempotency key: " and the reason.
func (e *KeyError) Error() string { return ErrKey.Error() + ": " + e.Reason }

// Is reports whether target is ErrKey.
func (e *KeyError) Is(target error) bool { return target == ErrKey }

// commaReason says why a bare key may not hold a comma.
const commaReason = "a bare key cannot hold one, as a comma is what an intermediary puts between two Idempotency-Key fields " +
	"it merges (quote the key as an RFC 8941 string to include a comma)"

// ParseKey decodes the value of an Idempotency-Key header: either a bare
// token of visible ASCII characters (as Stripe's clients send it) or an RFC
// 8941 sf-string ("..." with \" and \\ escapes, as the IETF httpapi draft
// specifies). Both forms name the same key: abc and "abc" are equal. The key
// must be 1 to MaxKeyLen characters; a bare token may not contain spaces,
// quotes, backslashes or commas (an intermediary that merges two
// Idempotency-Key fields into one joins them with a comma, which would make
// two keys a third), and an sf-string may not have parameters; an
// sf-string may hold a comma. Surrounding spaces and tabs are ignored. Its
// errors are *KeyError.
func ParseKey(v string) (string, error) {
	k, err := parseKey(v)
	if err != nil {
		return "", err
	}
	return k, nil
}

// parseKey is ParseKey with its error's type.
func parseKey(v string) (string, *KeyError) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return "", errorf("the key is empty")
	}
	if v[0] != '"' {
		for i := 0; i < len(v); i++ {
			switch c := v[i]; {
			case c <= ' ' || c >= 0x7f || c == '"' || c == '\\':
				return "", errorf("the key has a character other than visible ASCII at position %d (quote it as an RFC 8941 string to include spaces)", i+1)
			case c == ',':
				return "", errorf("the key has a comma at position %d: %s", i+1, commaReason)
			}
		}
		if len(v) > MaxKeyLen {
			return "", errorf("the key is %d characters long; the limit is %d", len(v), MaxKeyLen)
		}
		return v, nil
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", errorf("the quoted key has a backslash not followed by \" or \\")
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", errorf("the quoted key has characters after its closing quote")
			}
			k := b.String()
			switch {
			case k == "":
				return "", errorf("the key is empty")
			case len(k) > MaxKeyLen:
				return "", errorf("the key is %d characters long; the limit is %d", len(k), MaxKeyLen)
			}
			return k, nil
		case c < ' ' || c >= 0x7f:
			return "", errorf("the quoted key has a character other than printable ASCII at position %d", i+1)
		default:
			b.WriteByte(c)
		}
	}
	return "", errorf("the quoted key has no closing quote")
}

func errorf(format string, args ...any) *KeyError {
	return &KeyError{Reason: fmt.Sprintf(format, args...)}
}
