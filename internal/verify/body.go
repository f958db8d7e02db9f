package verify

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// diffBytes describes where got differs from want; "" when equal.
func diffBytes(want, got []byte) string {
	if bytes.Equal(want, got) {
		return ""
	}
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	from := max(0, i-16)
	window := func(b []byte) string {
		if i >= len(b) {
			return "(end)"
		}
		s, cut := clip(string(b[from:]), i-from+24)
		return quoteText(s) + cond(cut != "", "...")
	}
	size := ""
	if len(got) != len(want) {
		size = fmt.Sprintf(" of %d bytes, not %d,", len(got), len(want))
	}
	return fmt.Sprintf("body%s differs at byte %d: %s, not %s", size, i, window(got), window(want))
}

// changeOneValue returns body with one JSON value changed, the first number
// in document order (plus one), else the first string (an "x" appended),
// else the first boolean (flipped); the rest of the bytes are unchanged. It
// also says what it changed, as "$.amount: 1200 -> 1201". Its errors tell
// the user to give alt, the knob that sets another body.
func changeOneValue(body []byte, alt string) ([]byte, string, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, "", errors.New("there is no body to change")
	}
	if !json.Valid(body) {
		return nil, "", errors.New("the body is not JSON: give " + alt)
	}
	type frame struct {
		object    bool
		key       string
		index     int
		expectKey bool
	}
	// edit replaces body[start:end] by insert: the value at path goes
	// from old to new.
	type edit struct {
		start, end   int
		insert, path string
		old, new     string
	}
	var stack []*frame
	path := func() string {
		var b strings.Builder
		b.WriteString("$")
		for _, f := range stack {
			if f.object {
				if isIdentifier(f.key) {
					b.WriteString("." + f.key)
				} else {
					b.WriteString("[" + strconv.Quote(f.key) + "]")
				}
			} else {
				fmt.Fprintf(&b, "[%d]", f.index)
			}
		}
		return b.String()
	}
	next := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].object {
				stack[n-1].expectKey = true
			} else {
				stack[n-1].index++
			}
		}
	}
	var str, boolean *edit
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, "", fmt.Errorf("the body is not JSON: %v", err)
		}
		end := int(dec.InputOffset())
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, &frame{object: true, expectKey: true})
			case '[':
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
				next()
			}
			continue
		case string:
			if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].expectKey {
				stack[n-1].key, stack[n-1].expectKey = t, false
				continue
			}
			if str == nil {
				// Insert before the closing quote.
				str = &edit{start: end - 1, end: end - 1, insert: "x", path: path(), old: strconv.Quote(t), new: strconv.Quote(t + "x")}
			}
		case json.Number:
			s := t.String()
			var n string
			if i, err := t.Int64(); err == nil {
				n = strconv.FormatInt(i+1, 10)
				if i == math.MaxInt64 {
					n = strconv.FormatInt(i-1, 10)
				}
			} else if f, err := t.Float64(); err == nil && f+1 != f {
				n = strconv.FormatFloat(f+1, 'g', -1, 64)
			} else {
				n = "0"
			}
			return splice(body, end-len(s), end, n), fmt.Sprintf("%s: %s -> %s", path(), s, n), nil
		case bool:
			if boolean == nil {
				old := strconv.FormatBool(t)
				boolean = &edit{start: end - len(old), end: end, insert: strconv.FormatBool(!t), path: path(), old: old, new: strconv.FormatBool(!t)}
			}
		}
		next()
	}
	for _, e := range []*edit{str, boolean} {
		if e != nil {
			return splice(body, e.start, e.end, e.insert), fmt.Sprintf("%s: %s -> %s", e.path, e.old, e.new), nil
		}
	}
	return nil, "", errors.New("the body has no number, string or boolean to change: give " + alt)
}

// splice returns b with b[start:end] replaced by s, in a new slice.
func splice(b []byte, start, end int, s string) []byte {
	out := make([]byte, 0, len(b)+len(s))
	out = append(out, b[:start]...)
	out = append(out, s...)
	return append(out, b[end:]...)
}

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || i > 0 && '0' <= r && r <= '9') {
			return false
		}
	}
	return true
}

// reformat returns the JSON body re-indented, its object members sorted by
// name: the same document in other bytes.
func reformat(body []byte) ([]byte, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errors.New("there is no body")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return nil, errors.New("the body is not JSON")
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "    ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	out := b.Bytes()
	if bytes.Equal(out, body) {
		out = append([]byte("  "), out...)
	}
	return out, nil
}

// safeText returns s as it is when it has nothing to escape, else quoted
// (quoteText): server-chosen text never reaches the terminal raw.
func safeText(s string) string {
	if q := quoteText(s); q[1:len(q)-1] != s {
		return q
	}
	return s
}

// statusOf is the status of an answer, or "no answer".
func statusOf(e *exchange) string {
	switch {
	case e == nil:
		return "none"
	case e.err != nil:
		return "no answer (" + e.err.Error() + ")"
	case e.replayed():
		return strconv.Itoa(e.status) + " replayed"
	}
	return strconv.Itoa(e.status)
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

// cond returns s when ok, else the first of or, or "".
func cond(ok bool, s string, or ...string) string {
	if ok {
		return s
	}
	if len(or) > 0 {
		return or[0]
	}
	return ""
}

// listSome joins up to n items and says how many more there are.
func listSome(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:n], "; ") + fmt.Sprintf("; and %d more", len(items)-n)
}

// quoteText quotes s for a terminal, as Go's %q does: in double quotes,
// with every byte or rune that is not printable escaped (\x1b, \a, \u009b,
// \u202e, \x9b for a byte that is not UTF-8), C0 and C1 controls included.
// Printable non-ASCII text stays as it is.
func quoteText(s string) string { return strconv.Quote(s) }

// clip cuts s after max bytes, at a rune boundary, and says how much it cut.
func clip(s string, max int) (string, string) {
	if len(s) <= max {
		return s, ""
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], fmt.Sprintf(" ... (%d more bytes)", len(s)-n)
}
