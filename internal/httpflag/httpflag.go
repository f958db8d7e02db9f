// Package httpflag parses what a command line says about an HTTP endpoint,
// for the idemkey commands that send requests to one (storm, verify): a
// repeatable "Name: value" header flag (-H), the check of a target URL
// (--url, --count-url), of a token (--method, --key-header), and the
// --count-field path to a side-effect counter in a JSON document.
package httpflag

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Headers is a repeatable "Name: value" flag (flag.Value); Header holds what
// was given, names canonical.
type Headers struct{ Header http.Header }

// String lists the headers, sorted.
func (f *Headers) String() string {
	if f == nil {
		return ""
	}
	var parts []string
	for name, values := range f.Header {
		for _, v := range values {
			parts = append(parts, name+": "+v)
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// Set adds one "Name: value".
func (f *Headers) Set(s string) error {
	name, value, err := ParseHeader(s)
	if err != nil {
		return err
	}
	if f.Header == nil {
		f.Header = http.Header{}
	}
	f.Header.Add(name, value)
	return nil
}

// ParseHeader parses "Name: value": the name must be an RFC 9110 token, the
// value free of control characters (tabs aside). The name comes back
// canonical.
func ParseHeader(s string) (name, value string, err error) {
	name, value, ok := strings.Cut(s, ":")
	if !ok {
		return "", "", fmt.Errorf("want \"Name: value\", got %q", s)
	}
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	if !IsToken(name) {
		return "", "", fmt.Errorf("invalid header name %q", name)
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return "", "", fmt.Errorf("invalid value for header %s: control character %q", name, c)
		}
	}
	return http.CanonicalHeaderKey(name), value, nil
}

// IsToken reports whether s is a non-empty RFC 9110 token.
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// ParseURL parses an absolute http or https URL with a host.
func ParseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("a URL is required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("invalid URL %q: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("invalid URL %q: the scheme must be http or https", raw)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("invalid URL %q: no host", raw)
	}
	return u, nil
}

// CountField returns the integer at field, a dotted path of object member
// names, in the JSON document body.
func CountField(body []byte, field string) (int64, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return 0, fmt.Errorf("not JSON: %w", err)
	}
	for name := range strings.SplitSeq(field, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return 0, fmt.Errorf("field %q: %q is not inside an object", field, name)
		}
		if v, ok = obj[name]; !ok {
			return 0, fmt.Errorf("field %q: no member %q", field, name)
		}
	}
	num, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("field %q is not a number", field)
	}
	if n, err := num.Int64(); err == nil {
		return n, nil
	}
	f, err := num.Float64()
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, fmt.Errorf("field %q is not an integer: %s", field, num)
	}
	return int64(f), nil
}
