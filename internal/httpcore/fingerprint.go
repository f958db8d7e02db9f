package httpcore

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/idemkey/idemkey/internal/canon"
)

// fingerprint returns the SHA-256 of what r asks for, so that a retry of one
// request matches and any other request does not. A JSON body that cannot
// be canonicalised is a problem; every other body is fingerprinted.
//
// The hash input is, in this order, with field(s) standing for the length
// of s as a uvarint followed by s:
//
//	"idemkey fingerprint v1"
//	field(method) field(escaped path) field(query, parameters sorted by name)
//	for each name in Options.FingerprintHeaders, sorted:
//	    field(name) uvarint(number of values) field(value)...
//	one byte for the kind of body, then what the body contributes:
//
//	'e' field(codings) bytes   a Content-Encoding other than identity: the
//	                           codings, lower case, comma-separated, and the
//	                           body's bytes as sent, never decoded. A
//	                           client that compresses its body anew for a
//	                           retry must do so deterministically.
//	'j' canonical JSON         Content-Type application/json or */*+json:
//	                           the body in canonical form (package canon:
//	                           members sorted, numbers by value, no
//	                           insignificant whitespace), Options.IgnoreFields
//	                           left out.
//	'm' part...                Content-Type multipart/form-data with a
//	                           boundary, and a body that parses as such
//	                           within maxFormParts parts of at most
//	                           maxPartHeaderBytes of headers each: for each
//	                           part in order, its Content-Disposition type,
//	                           name and filename (RFC 2231 decoded), its
//	                           Content-Type (media type and parameters
//	                           normalised; as sent if it does not parse), its
//	                           Content-Transfer-Encoding, each as a byte 0 if
//	                           absent or 1 and field(value), and the SHA-256
//	                           of its content as sent. Boundary, preamble,
//	                           epilogue, line ends and other part headers
//	                           contribute nothing, so a re-encoded form is
//	                           the same request.
//	'b' bytes                  anything else, an empty body, and a form body
//	                           that does not parse: the body's bytes.
//
// The body's contribution ends the input, so it needs no length of its own.
// JSON, other bodies and empty ones hash as they did before forms and
// encodings were told apart, so fingerprints stored by an older version
// still match; a form's did change (it was 'b').
func (h *Guard) fingerprint(r *http.Request, body []byte) (string, *problem) {
	s := fpPool.Get().(*fpState)
	defer s.put()
	b := append(s.buf[:0], "idemkey fingerprint v1"...)
	b = field(b, r.Method)
	b = field(b, r.URL.EscapedPath())
	b = field(b, canonicalQuery(r.URL.RawQuery))
	for _, name := range h.o.FingerprintHeaders {
		b = field(b, name)
		vs := r.Header.Values(name)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = field(b, v)
		}
	}
	if len(body) == 0 {
		return s.sum(append(b, 'b'), nil), nil
	}
	if enc := encodings(r.Header["Content-Encoding"]); enc != "" {
		return s.sum(field(append(b, 'e'), enc), body), nil
	}
	ct := r.Header.Get("Content-Type")
	if isJSON(ct) {
		b = append(b, 'j')
		opts := canon.Options{MaxDepth: h.o.MaxJSONDepth, Omit: h.o.IgnoreFields}
		if len(body) > streamOver {
			s.buf = b
			s.h.Reset()
			s.h.Write(b)
			if _, err := canon.WriteJSON(s.h, body, opts); err != nil {
				return "", jsonProblem(err)
			}
			return string(s.h.Sum(s.digest[:0])), nil
		}
		b, err := canon.AppendJSON(b, body, opts)
		if err != nil {
			s.buf = b
			return "", jsonProblem(err)
		}
		return s.sum(b, nil), nil
	}
	if boundary := formBoundary(ct); boundary != "" {
		s.buf = append(b, 'm')
		s.h.Reset()
		s.h.Write(s.buf)
		if s.writeForm(s.h, body, boundary) {
			return string(s.h.Sum(s.digest[:0])), nil
		}
		// Not a form after all: its bytes, below.
	}
	return s.sum(append(b, 'b'), body), nil
}

// streamOver is the size of body above which fingerprint feeds the hash
// piece by piece; smaller ones are gathered in one buffer and hashed at
// once, which is quicker.
const streamOver = 64 << 10

// sum returns the SHA-256 of prefix followed by body.
func (s *fpState) sum(prefix, body []byte) string {
	if len(body) <= streamOver {
		b := append(prefix, body...)
		s.buf = b
		sum := sha256.Sum256(b)
		return string(sum[:])
	}
	s.buf = prefix
	s.h.Reset()
	s.h.Write(prefix)
	s.h.Write(body)
	return string(s.h.Sum(s.digest[:0]))
}

// fpState is what fingerprint needs, pooled.
type fpState struct {
	h, ph   hash.Hash // the fingerprint when streamed, a form part's content
	buf     []byte    // the hash input when gathered; else the fields before the body
	part    []byte    // a form part's contribution
	digest  [sha256.Size]byte
	copyBuf [4 << 10]byte
}

var fpPool = sync.Pool{New: func() any { return &fpState{h: sha256.New(), ph: sha256.New()} }}

func (s *fpState) put() {
	if cap(s.buf) > 2*streamOver {
		s.buf = nil // keep ordinary buffers, drop huge ones
	}
	if cap(s.part) > 64<<10 {
		s.part = nil
	}
	fpPool.Put(s)
}

// jsonProblem is the problem for a JSON body canon refused. Its detail is
// made of canon's reason and offset: never of the error's text, which names
// the package.
func jsonProblem(err error) *problem {
	var se *canon.SyntaxError
	if !errors.As(err, &se) { // canon returns nothing else; no internals either way
		se = &canon.SyntaxError{Msg: "unreadable", Err: canon.ErrSyntax}
	}
	at := " at byte offset " + strconv.FormatInt(se.Offset, 10)
	var detail string
	switch {
	case errors.Is(err, canon.ErrDepth):
		detail = "The JSON request body nests too deeply (" + se.Msg + at + "). Nothing was stored."
	case errors.Is(err, canon.ErrDuplicateKey):
		detail = "The JSON request body has an object with the same member name twice (the second" + at +
			"), so its meaning is ambiguous. Send each member once; nothing was stored."
	case errors.Is(err, canon.ErrTooLarge):
		return problemBodyTooLarge.with("The JSON request body is too large to fingerprint. Nothing was processed or stored.")
	default:
		detail = "The request body is not valid JSON: " + se.Msg + at + ". Fix the body; nothing was stored."
	}
	return problemJSONMalformed.with(detail)
}

// canonicalQuery sorts the query's parameters by name, keeping the order of
// a parameter's values (which may matter to the application), so that
// ?b=2&a=1 and ?a=1&b=2 are the same request. A query that does not parse is
// used as it is.
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return raw
	}
	return q.Encode()
}

// isJSON reports whether a Content-Type is JSON: application/json or any
// media type with a +json suffix.
func isJSON(ct string) bool {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = strings.ToLower(strings.TrimSpace(ct))
	return ct == "application/json" || strings.HasSuffix(ct, "+json")
}

func field(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
