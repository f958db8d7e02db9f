package httpcore

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"net/http"
	"net/url"
	"strings"

	"github.com/idemkey/idemkey/internal/canon"
)

// fingerprint returns the SHA-256 of what r asks for: its method, escaped
// path, canonical query, the configured headers and its body, JSON bodies in
// canonical form. Each part is length-prefixed, so no two different requests
// hash the same bytes. A JSON body that cannot be canonicalised is a problem.
func (h *Handler) fingerprint(r *http.Request, body []byte) (string, *problem) {
	d := sha256.New()
	d.Write([]byte("idemkey fingerprint v1"))
	field(d, r.Method)
	field(d, r.URL.EscapedPath())
	field(d, canonicalQuery(r.URL.RawQuery))
	for _, name := range h.o.FingerprintHeaders {
		field(d, name)
		vs := r.Header.Values(name)
		writeLen(d, len(vs))
		for _, v := range vs {
			field(d, v)
		}
	}
	if len(body) > 0 && isJSON(r.Header.Get("Content-Type")) {
		c, err := canon.JSON(body, canon.Options{MaxDepth: h.o.MaxJSONDepth, Omit: h.o.IgnoreFields})
		if err != nil {
			return "", jsonProblem(err)
		}
		d.Write([]byte{'j'})
		body = c
	} else {
		d.Write([]byte{'b'})
	}
	writeLen(d, len(body))
	d.Write(body)
	return string(d.Sum(nil)), nil
}

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

func field(d hash.Hash, s string) {
	writeLen(d, len(s))
	d.Write([]byte(s))
}

func writeLen(d hash.Hash, n int) {
	var b [binary.MaxVarintLen64]byte
	d.Write(b[:binary.PutUvarint(b[:], uint64(n))])
}
