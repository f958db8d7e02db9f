package storm

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
)

// The placeholders of the command's -H values and body: {n} is the key's
// index, 0 to Keys-1, and {key} the idempotency key itself. Every
// duplicate of a key sends the same expansion.
const (
	placeholderN   = "{n}"
	placeholderKey = "{key}"
)

// hasPlaceholder reports whether s contains a placeholder.
func hasPlaceholder(s string) bool {
	return strings.Contains(s, placeholderN) || strings.Contains(s, placeholderKey)
}

// expand replaces the placeholders in s.
func expand(s, key string, i int) string {
	if !hasPlaceholder(s) {
		return s
	}
	return strings.NewReplacer(placeholderN, strconv.Itoa(i), placeholderKey, key).Replace(s)
}

// bodyTemplate returns body as Config.Body when it has no placeholder, and
// otherwise a Config.BodyFor that expands them.
func bodyTemplate(body []byte) ([]byte, func(key string, i int) []byte) {
	if !bytes.Contains(body, []byte(placeholderN)) && !bytes.Contains(body, []byte(placeholderKey)) {
		return body, nil
	}
	tmpl := string(body)
	return nil, func(key string, i int) []byte { return []byte(expand(tmpl, key, i)) }
}

// headerTemplate splits h into the headers without placeholders, sent as
// they are (Config.Header), and a Config.HeaderFor that expands the others.
// A header with a placeholder in any of its values goes to HeaderFor whole.
func headerTemplate(h http.Header) (http.Header, func(key string, i int) http.Header) {
	fixed, templated := http.Header{}, http.Header{}
	for name, values := range h {
		to := fixed
		for _, v := range values {
			if hasPlaceholder(v) {
				to = templated
			}
		}
		to[name] = values
	}
	if len(templated) == 0 {
		return fixed, nil
	}
	return fixed, func(key string, i int) http.Header {
		out := make(http.Header, len(templated))
		for name, values := range templated {
			for _, v := range values {
				out[name] = append(out[name], expand(v, key, i))
			}
		}
		return out
	}
}
