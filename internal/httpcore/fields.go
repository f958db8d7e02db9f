package httpcore

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"
)

// ErrUnknownResponseVersion is returned (wrapped) for bytes whose first
// byte is not a stored response version this release reads, or names a
// flag it does not know: a response written by a later major version of
// the format (docs/spec.md), or no stored response at all. It is an
// ErrCorruptResponse too: a replay refuses it, never guesses.
var ErrUnknownResponseVersion = fmt.Errorf("%w: not a version or flags this release reads", ErrCorruptResponse)

// EncodedResponse is a stored response's encoding, field by field, by the
// names of docs/spec.md: what 'idemkey inspect --raw' shows, and what a
// reader in another language must agree with.
type EncodedResponse struct {
	// Version is 1 or 2.
	Version int
	// BodyOmitted says the original body was over MaxResponseBytes and
	// Body is the problem that stands in for it.
	BodyOmitted bool
	// Compressed says the payload was a zstd frame (version 2 only).
	Compressed bool
	// DictionaryID is the ID of the dictionary the frame names, 0 for none.
	DictionaryID uint32
	// Headers are the header fields, name and value, in stored order.
	Headers [][2]string
	// Body is the body, decompressed.
	Body []byte
}

// Fields decodes a stored response field by field, in stored order, as
// Decode does otherwise: ErrUnknownResponseVersion (wrapped) for a version
// or flags it does not read, ErrUnknownDictionary (wrapped) for a frame
// compressed with a dictionary c does not hold, ErrCorruptResponse for
// anything else it cannot read.
func (c *ResponseCodec) Fields(b []byte) (*EncodedResponse, error) {
	if len(b) == 0 {
		return nil, ErrCorruptResponse
	}
	if b[0] == responseV1 {
		if len(b) < 2 {
			return nil, ErrCorruptResponse
		}
		r := &EncodedResponse{Version: 1, BodyOmitted: b[1]&flagBodyOmitted != 0}
		n, p, ok := uvarint(b[2:])
		if !ok || n > uint64(len(p)) {
			return nil, ErrCorruptResponse
		}
		for range n {
			var k, v []byte
			if k, p, ok = lengthPrefixed(p); !ok {
				return nil, ErrCorruptResponse
			}
			if v, p, ok = lengthPrefixed(p); !ok {
				return nil, ErrCorruptResponse
			}
			r.Headers = append(r.Headers, [2]string{string(k), string(v)})
		}
		r.Body = p
		return r, nil
	}
	if b[0]&^flagsV2 != responseV2 {
		return nil, fmt.Errorf("%w (first byte %#02x)", ErrUnknownResponseVersion, b[0])
	}
	r := &EncodedResponse{Version: 2, BodyOmitted: b[0]&flagBodyOmitted != 0, Compressed: b[0]&flagCompressed != 0}
	p := b[1:]
	if r.Compressed {
		var h zstd.Header
		if err := h.Decode(append(zstdMagic[:], p...)); err != nil {
			return nil, ErrCorruptResponse
		}
		r.DictionaryID = h.DictionaryID
		var err error
		if p, err = c.decompress(p); err != nil {
			return nil, err
		}
	}
	n, p, ok := uvarint(p)
	if !ok || n > uint64(len(p)) {
		return nil, ErrCorruptResponse
	}
	for range n {
		var k, v string
		if k, p, ok = entry(p, headerNameList); !ok {
			return nil, ErrCorruptResponse
		}
		if v, p, ok = entry(p, headerValueList); !ok {
			return nil, ErrCorruptResponse
		}
		r.Headers = append(r.Headers, [2]string{k, v})
	}
	r.Body = p
	return r, nil
}

// MarshalJSON writes the response as one JSON object with the
// specification's field names: bytes (header names and values, the body)
// as a string when they are valid UTF-8, else as {"hex": "..."}.
func (r *EncodedResponse) MarshalJSON() ([]byte, error) {
	headers := make([][2]any, len(r.Headers))
	for i, h := range r.Headers {
		headers[i] = [2]any{specBytes(h[0]), specBytes(h[1])}
	}
	return json.Marshal(struct {
		Version      int      `json:"version"`
		BodyOmitted  bool     `json:"body_omitted"`
		Compressed   bool     `json:"compressed"`
		DictionaryID uint32   `json:"dictionary_id"`
		Headers      [][2]any `json:"headers"`
		Body         any      `json:"body"`
	}{r.Version, r.BodyOmitted, r.Compressed, r.DictionaryID, headers, specBytes(r.Body)})
}

// specBytes is bytes as the specification's JSON views write them: a
// string when valid UTF-8, else {"hex": "..."}.
func specBytes[B ~string | ~[]byte](b B) any {
	if utf8.Valid([]byte(b)) {
		return string(b)
	}
	return map[string]string{"hex": hex.EncodeToString([]byte(b))}
}
