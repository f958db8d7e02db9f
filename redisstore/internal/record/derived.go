package record

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
)

// DerivedKey returns the key of one step of a record's operation to hand
// to a downstream provider: base64url of the first 24 bytes of
// SHA-256("idemkey derived key\x00" || for each of prefix, scope, key,
// step: uvarint(len) || bytes), 32 characters that reveal nothing of the
// scope or key and are different for every other (prefix, scope, key,
// step).
func DerivedKey(prefix, scope, key, step string) string {
	h := sha256.New()
	h.Write([]byte("idemkey derived key\x00"))
	for _, s := range [...]string{prefix, scope, key, step} {
		var n [binary.MaxVarintLen64]byte
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:24])
}
