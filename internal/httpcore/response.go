package httpcore

import (
	"encoding/binary"
	"errors"
	"net/http"
)

// A stored response is one redisstore.Response: Code is the HTTP status, and
// Body encodes the headers and body:
//
//	version byte (1) | flags byte | uvarint header count |
//	{uvarint len, name, uvarint len, value}... | body
//
// A header with several values is several name/value pairs, in order.

const (
	responseVersion = 1
	flagBodyOmitted = 1 // the body was over MaxResponseBytes; a problem body stands in
)

// StoredResponse is a response as stored for replay.
type StoredResponse struct {
	Status int
	Header http.Header
	Body   []byte
	// BodyOmitted is true when the original body exceeded MaxResponseBytes
	// and Body is the response-too-large problem that replays get instead.
	BodyOmitted bool
}

// ErrCorruptResponse is returned by DecodeResponse for bytes that are not a
// stored response.
var ErrCorruptResponse = errors.New("idemkey: stored response is corrupt")

func appendResponse(dst []byte, h http.Header, body []byte, omitted bool) []byte {
	flags := byte(0)
	if omitted {
		flags |= flagBodyOmitted
	}
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	dst = append(dst, responseVersion, flags)
	dst = binary.AppendUvarint(dst, uint64(n))
	for k, vs := range h {
		for _, v := range vs {
			dst = binary.AppendUvarint(dst, uint64(len(k)))
			dst = append(dst, k...)
			dst = binary.AppendUvarint(dst, uint64(len(v)))
			dst = append(dst, v...)
		}
	}
	return append(dst, body...)
}

// DecodeResponse decodes a stored response body (the Body of the
// redisstore.Response the middleware stored) with its status code.
func DecodeResponse(status int, b []byte) (*StoredResponse, error) {
	if len(b) < 2 || b[0] != responseVersion {
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
