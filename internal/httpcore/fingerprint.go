package httpcore

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/idemkey/idemkey/internal/canon"
)

// fingerprint returns the SHA-256 of what r asks for: its method, escaped
// path, canonical query, the configured headers and its body, JSON bodies in
// canonical form. Each part is length-prefixed, so no two different requests
// hash the same bytes. A JSON body that cannot be canonicalised is a problem.
func (h *Guard) fingerprint(r *http.Request, body []byte) (string, *problem) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	b := append((*bp)[:0], "idemkey fingerprint v1"...)
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
	if len(body) > 0 && isJSON(r.Header.Get("Content-Type")) {
		// The canonical body goes at the end, so it needs no length prefix
		// of its own: the kind byte and the fixed fields before it delimit it.
		b = append(b, 'j')
		var err error
		if b, err = canon.AppendJSON(b, body, canon.Options{MaxDepth: h.o.MaxJSONDepth, Omit: h.o.IgnoreFields}); err != nil {
			*bp = b[:0]
			return "", jsonProblem(err)
		}
	} else {
		b = append(append(b, 'b'), body...)
	}
	sum := sha256.Sum256(b)
	if cap(b) <= 64<<10 {
		*bp = b[:0] // keep ordinary buffers, drop huge ones
	}
	return string(sum[:]), nil
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func jsonProblem(err error) *problem {
	detail := "The request body is not valid JSON: " + err.Error() + ". Fix the body; nothing was stored."
	switch {
	case errors.Is(err, canon.ErrDepth):
		detail = "The JSON request body nests too deeply. Nothing was stored."
	case errors.Is(err, canon.ErrDuplicateKey):
		detail = "The JSON request body has an object with the same member name twice, so its meaning is ambiguous. Send each member once; nothing was stored."
	}
	return &problem{status: http.StatusBadRequest, slug: "json-malformed", title: "Malformed JSON body", detail: detail}
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
