package storm

import (
	"encoding/hex"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A history has one line per attempt, and 'idemkey check' reads hundreds
// of thousands of them: the attempt and operation lines, flat objects of
// strings, integers and booleans, are parsed here by hand, several times
// faster than encoding/json's reflection. Anything else, or anything this
// parser does not take exactly (a float, a nested value, a malformed
// line), goes to encoding/json, which decides and explains.

// parseFlat parses line, a flat JSON object, into l, and reports whether
// it could.
func parseFlat(line []byte, l *lineJSON) bool {
	p := flatParser{b: line, scratch: l.scratch[:0]}
	defer func() { l.scratch = p.scratch }()
	p.space()
	if !p.byte('{') {
		return false
	}
	p.space()
	if p.byte('}') {
		return p.end()
	}
	for {
		p.space()
		key, ok := p.name()
		if !ok {
			return false
		}
		p.space()
		if !p.byte(':') {
			return false
		}
		p.space()
		if !p.member(key, l) {
			return false
		}
		p.space()
		if p.byte('}') {
			return p.end()
		}
		if !p.byte(',') {
			return false
		}
	}
}

type flatParser struct {
	b       []byte
	i       int
	scratch []byte // for unescaping
}

// name parses a member's name, which has no escapes in a history; the
// bytes are the line's.
func (p *flatParser) name() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			p.i++
			return p.b[start : p.i-1], true
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return nil, false
		}
		p.i++
	}
	return nil, false
}

func (p *flatParser) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\r' || p.b[p.i] == '\n') {
		p.i++
	}
}

func (p *flatParser) byte(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *flatParser) end() bool {
	p.space()
	return p.i == len(p.b)
}

// member parses the value of key into l.
func (p *flatParser) member(name []byte, l *lineJSON) bool {
	switch key := string(name); key {
	case "op", "copy", "attempt", "status":
		n, ok := p.int()
		if !ok || n != int64(int(n)) {
			return false
		}
		v := int(n)
		switch key {
		case "op":
			l.opVal, l.Op = v, &l.opVal
		case "copy":
			l.Copy = v
		case "attempt":
			l.attemptVal, l.Attempt = v, &l.attemptVal
		default:
			l.Status = v
		}
	case "sent_ns", "done_ns", "scheduled_ns", "ended_ns", "size":
		n, ok := p.int()
		if !ok {
			return false
		}
		switch key {
		case "sent_ns":
			l.SentNS = n
		case "done_ns":
			l.DoneNS = n
		case "scheduled_ns":
			l.ScheduledNS = n
		case "ended_ns":
			l.EndedNS = n
		default:
			l.Size = n
		}
	case "replayed", "retried", "probe", "oversize", "late":
		v, ok := p.bool()
		if !ok {
			return false
		}
		switch key {
		case "replayed":
			l.Replayed = v
		case "retried":
			l.Retried = v
		case "probe":
			l.Probe = v
		case "oversize":
			l.Oversize = v
		default:
			l.Late = v
		}
	case "key", "class", "body_sha256":
		// Kept as the line's bytes when they have no escape: the key
		// repeats on every attempt of its operation, the class is one of
		// a few constants and the digest goes into an array, so that
		// none of them costs a string per line.
		b, ok := p.raw()
		if !ok {
			return false
		}
		switch key {
		case "key":
			l.Key, l.keyRaw = "", b
		case "class":
			l.Class = Class(b)
			for _, c := range classes {
				if string(b) == string(c) {
					l.Class = c // the constant, not a copy per line
				}
			}
		default:
			if n, err := hex.Decode(l.sum[:], b); err == nil && n == len(l.sum) && len(b) == 2*n {
				l.BodySHA256, l.hasSum = "", true
			} else {
				l.BodySHA256, l.hasSum = string(b), false
			}
		}
	case "snippet", "error":
		s, ok := p.str()
		if !ok {
			return false
		}
		if key == "snippet" {
			l.Snippet = s
		} else {
			l.Error = s
		}
	default:
		return false // another member: encoding/json's to take
	}
	return true
}

func (p *flatParser) int() (int64, bool) {
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		p.i++
	}
	if p.i == digits || (p.b[digits] == '0' && p.i-digits > 1) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(p.b[start:p.i]), 10, 64)
	return n, err == nil
}

func (p *flatParser) bool() (bool, bool) {
	rest := p.b[p.i:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		p.i += 4
		return true, true
	case len(rest) >= 5 && string(rest[:5]) == "false":
		p.i += 5
		return false, true
	}
	return false, false
}

// raw parses a JSON string without escapes and returns its bytes, the
// line's; a string with escapes is left to str.
func (p *flatParser) raw() ([]byte, bool) {
	start := p.i
	b, ok := p.name()
	if !ok || !utf8.Valid(b) {
		p.i = start
		return nil, false
	}
	return b, true
}

// str parses a JSON string, unescaping it; it refuses control characters
// and invalid UTF-8, which encoding/json would take differently.
func (p *flatParser) str() (string, bool) {
	if !p.byte('"') {
		return "", false
	}
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			if !utf8.Valid(s) {
				return "", false
			}
			return string(s), true
		case c == '\\':
			return p.escaped(start)
		case c < 0x20:
			return "", false
		}
		p.i++
	}
	return "", false
}

// escaped finishes a string begun at start that has escapes.
func (p *flatParser) escaped(start int) (string, bool) {
	out := append(p.scratch[:0], p.b[start:p.i]...)
	defer func() { p.scratch = out[:0] }()
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			if !utf8.Valid(out) {
				return "", false
			}
			return string(out), true
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.b) {
			return "", false
		}
		e := p.b[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", false
			}
			if utf16.IsSurrogate(r) {
				if p.i+1 >= len(p.b) || p.b[p.i] != '\\' || p.b[p.i+1] != 'u' {
					return "", false // a lone surrogate: encoding/json's
				}
				p.i += 2
				r2, ok := p.hex4()
				if !ok {
					return "", false
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return "", false
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", false
		}
	}
	return "", false
}

func (p *flatParser) hex4() (rune, bool) {
	if p.i+4 > len(p.b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(p.b[p.i:p.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	p.i += 4
	return rune(n), true
}
