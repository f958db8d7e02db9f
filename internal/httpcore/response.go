package httpcore

import (
	"encoding/binary"
	"errors"
	"net/http"
	"slices"
	"strings"
)

// A stored response is one redisstore.Response: Code is the HTTP status, and
// Body encodes the headers and body. Two versions exist; both decode.
//
// Version 2, written since compression came in, spends one byte on the
// version and the flags, and names common headers and values by their index
// in the tables of header_table.go:
//
//	0x20|flags | payload
//	payload:  uvarint header count | {name, value}... | body
//	name:     uvarint 2*i (names[i]) or 2*len+1 followed by len bytes
//	value:    uvarint 2*i (values[i]) or 2*len+1 followed by len bytes
//
// With flagCompressed the payload is a zstd frame without its 4-byte magic
// number (always the same, so not worth storing); the frame names the
// dictionary it was compressed with, if any.
//
// Version 1, written by the first releases:
//
//	0x01 | flags byte | uvarint header count |
//	{uvarint len, name, uvarint len, value}... | body
//
// In both, a header with several values is several name/value pairs, in
// order, and flagBodyOmitted says the body was over MaxResponseBytes and a
// problem stands in for it.

const (
	responseV1 = 1
	responseV2 = 0x20 // the high nibble is the version, the low one the flags

	flagBodyOmitted = 1 // the body was over MaxResponseBytes; a problem body stands in
	flagCompressed  = 2 // the payload is a zstd frame (version 2 only)
	flagsV2         = flagBodyOmitted | flagCompressed
)

// StoredResponse is a response as stored for replay.
type StoredResponse struct {
	Status int
	Header http.Header
	Body   []byte
	// BodyOmitted is true when the original body exceeded MaxResponseBytes
	// and Body is the response-too-large problem that replays get instead.
	BodyOmitted bool
	// Compressed is true when the response was stored compressed; Body is
	// the original, decompressed.
	Compressed bool
}

// ErrCorruptResponse is returned by DecodeResponse for bytes that are not a
// stored response.
var ErrCorruptResponse = errors.New("idemkey: stored response is corrupt")

// appendResponse appends the version 2 encoding of a response, uncompressed.
func appendResponse(dst []byte, h http.Header, body []byte, omitted bool) []byte {
	var stack [16]hfield
	return appendFields(dst, fieldsOf(stack[:0], h), body, omitted)
}

// hfield is a header's name and values.
type hfield struct {
	name string
	vals []string
}

// fieldsOf appends h's headers to dst, sorted by name.
func fieldsOf(dst []hfield, h http.Header) []hfield {
	for k, vs := range h {
		dst = append(dst, hfield{k, vs})
	}
	sortFields(dst)
	return dst
}

// sortFields sorts fs by name.
func sortFields(fs []hfield) {
	slices.SortFunc(fs, func(a, b hfield) int { return strings.Compare(a.name, b.name) })
}

// appendFields appends the version 2 encoding of a response with headers
// fs, sorted by name, uncompressed.
func appendFields(dst []byte, fs []hfield, body []byte, omitted bool) []byte {
	flags := byte(0)
	if omitted {
		flags |= flagBodyOmitted
	}
	dst = append(dst, responseV2|flags)
	dst = appendHeaders(dst, fs)
	return append(dst, body...)
}

// appendHeaders appends a version 2 header block of fs, sorted by name, so
// that equal headers always encode to equal bytes.
func appendHeaders(dst []byte, fs []hfield) []byte {
	n := 0
	for _, f := range fs {
		n += len(f.vals)
	}
	dst = binary.AppendUvarint(dst, uint64(n))
	for _, f := range fs {
		for _, v := range f.vals {
			dst = appendEntry(dst, f.name, headerNames)
			dst = appendEntry(dst, v, headerValues)
		}
	}
	return dst
}

// appendEntry appends s as its index in table, or as a literal.
func appendEntry(dst []byte, s string, table map[string]int) []byte {
	if i, ok := table[s]; ok {
		return binary.AppendUvarint(dst, uint64(2*i))
	}
	dst = binary.AppendUvarint(dst, uint64(2*len(s)+1))
	return append(dst, s...)
}

// DecodeResponse decodes a stored response body (the Body of the
// redisstore.Response the middleware stored) with its status code. A
// response compressed with a dictionary needs a ResponseCodec that holds
// it: DecodeResponse returns ErrUnknownDictionary for it.
func DecodeResponse(status int, b []byte) (*StoredResponse, error) {
	return (*ResponseCodec)(nil).Decode(status, b)
}

// decodeV2Payload decodes the payload of a version 2 response into r.
func decodeV2Payload(r *StoredResponse, b []byte) error {
	n, b, ok := uvarint(b)
	if !ok || n > uint64(len(b)) {
		return ErrCorruptResponse
	}
	r.Header = make(http.Header, n)
	for range n {
		var k, v string
		if k, b, ok = entry(b, headerNameList); !ok {
			return ErrCorruptResponse
		}
		if v, b, ok = entry(b, headerValueList); !ok {
			return ErrCorruptResponse
		}
		r.Header[k] = append(r.Header[k], v)
	}
	r.Body = b
	return nil
}

// replayInto decodes a stored version 2 response for a replay: its headers
// go into hdr, each replacing what hdr held, with Idempotent-Replayed:
// true, and it returns the body. The values share one slice, where
// Decode's map costs a map and a slice per header. done is false, with hdr
// untouched, for a response it leaves to Decode: version 1, or headers not
// in the order the encoder writes them. On an error hdr is untouched.
func (c *ResponseCodec) replayInto(hdr http.Header, b []byte) (body []byte, done bool, err error) {
	if len(b) == 0 || b[0]&^flagsV2 != responseV2 {
		return nil, false, nil
	}
	payload := b[1:]
	if b[0]&flagCompressed != 0 {
		if payload, err = c.decompress(payload); err != nil {
			return nil, true, err
		}
	}
	n, p, ok := uvarint(payload)
	if !ok || n > uint64(len(p)) {
		return nil, true, ErrCorruptResponse
	}
	var stack [16]string
	names := stack[:0]
	vals := make([]string, n+1) // and Idempotent-Replayed's
	for i := range n {
		var k string
		if k, p, ok = entry(p, headerNameList); !ok {
			return nil, true, ErrCorruptResponse
		}
		if vals[i], p, ok = entry(p, headerValueList); !ok {
			return nil, true, ErrCorruptResponse
		}
		if len(names) > 0 && k < names[len(names)-1] {
			return nil, false, nil
		}
		names = append(names, k)
	}
	for i := 0; i < len(names); {
		j := i + 1
		for j < len(names) && names[j] == names[i] {
			j++
		}
		hdr[names[i]] = vals[i:j:j] // an append to it copies
		i = j
	}
	vals[n] = "true"
	hdr["Idempotent-Replayed"] = vals[n:]
	return p, true, nil
}

// entry reads a name or value: an index into table, or a literal.
func entry(b []byte, table []string) (string, []byte, bool) {
	n, b, ok := uvarint(b)
	if !ok {
		return "", nil, false
	}
	if n%2 == 0 {
		if n/2 >= uint64(len(table)) {
			return "", nil, false
		}
		return table[n/2], b, true
	}
	if n/2 > uint64(len(b)) {
		return "", nil, false
	}
	return string(b[:n/2]), b[n/2:], true
}

// decodeV1 decodes a version 1 response.
func decodeV1(status int, b []byte) (*StoredResponse, error) {
	if len(b) < 2 || b[0] != responseV1 {
		return nil, ErrCorruptResponse
	}
	r := &StoredResponse{Status: status, BodyOmitted: b[1]&flagBodyOmitted != 0}
	b = b[2:]
	n, b, ok := uvarint(b)
	if !ok || n > uint64(len(b)) {
		return nil, ErrCorruptResponse
	}
	r.Header = make(http.Header, n)
	for range n {
		var k, v []byte
		if k, b, ok = lengthPrefixed(b); !ok {
			return nil, ErrCorruptResponse
		}
		if v, b, ok = lengthPrefixed(b); !ok {
			return nil, ErrCorruptResponse
		}
		r.Header[string(k)] = append(r.Header[string(k)], string(v))
	}
	r.Body = b
	return r, nil
}

func uvarint(b []byte) (uint64, []byte, bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, nil, false
	}
	return n, b[k:], true
}

func lengthPrefixed(b []byte) (field, rest []byte, ok bool) {
	n, b, ok := uvarint(b)
	if !ok || n > uint64(len(b)) {
		return nil, nil, false
	}
	return b[:n], b[n:], true
}
