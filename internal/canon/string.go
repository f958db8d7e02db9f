package canon

import (
	"unicode/utf16"
	"unicode/utf8"
)

// str reads a string starting at the opening quote at p.pos, adds its
// canonical text as a node, and returns the decoded string. For a member name
// (isName) the decoded string stays valid until the object closes; otherwise
// only until the next string is read.
func (p *parser) str(isName bool) ([]byte, error) {
	s := p.src
	start := p.pos
	i := start + 1
	for i < len(s) {
		c := s[i]
		if safe[c] {
			i++
			continue
		}
		switch {
		case c == '"':
			// No escapes: the source text is already canonical.
			p.pos = i + 1
			p.addScalar(true, start, p.pos)
			return s[start+1 : i], nil
		case c == '\\':
			return p.strEscaped(i, isName)
		case c < 0x20:
			return nil, p.fail(ErrSyntax, i, "invalid control character in string")
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			return nil, p.fail(ErrSyntax, i, "invalid UTF-8 in string")
		}
		i += size
	}
	return nil, p.fail(ErrSyntax, len(s), "unexpected end of input in string")
}

// strEscaped finishes reading a string whose first backslash is at i.
func (p *parser) strEscaped(i int, isName bool) ([]byte, error) {
	s := p.src
	var d []byte
	if isName {
		d = p.names
	} else {
		d = p.dec[:0]
	}
	base := len(d)
	d = append(d, s[p.pos+1:i]...)
	run := i // start of the pending run of bytes copied as they are
	for {
		if i >= len(s) {
			return nil, p.fail(ErrSyntax, i, "unexpected end of input in string")
		}
		c := s[i]
		if safe[c] {
			i++
			continue
		}
		if c == '"' {
			d = append(d, s[run:i]...)
			break
		}
		if c < 0x20 {
			return nil, p.fail(ErrSyntax, i, "invalid control character in string")
		}
		if c >= 0x80 {
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				return nil, p.fail(ErrSyntax, i, "invalid UTF-8 in string")
			}
			i += size
			continue
		}
		// c == '\\'
		d = append(d, s[run:i]...)
		if i+1 >= len(s) {
			return nil, p.fail(ErrSyntax, i+1, "unexpected end of input in string escape")
		}
		switch s[i+1] {
		case '"', '\\', '/':
			d = append(d, s[i+1])
		case 'b':
			d = append(d, '\b')
		case 'f':
			d = append(d, '\f')
		case 'n':
			d = append(d, '\n')
		case 'r':
			d = append(d, '\r')
		case 't':
			d = append(d, '\t')
		case 'u':
			r, ok := hex4(s, i+2)
			if !ok {
				return nil, p.fail(ErrSyntax, i, `invalid \u escape in string`)
			}
			if utf16.IsSurrogate(r) {
				r2, ok := rune(0), false
				if r < 0xdc00 && i+11 < len(s) && s[i+6] == '\\' && s[i+7] == 'u' {
					r2, ok = hex4(s, i+8)
				}
				if !ok || r2 < 0xdc00 || r2 > 0xdfff {
					return nil, p.fail(ErrSyntax, i, "lone surrogate escape in string")
				}
				r = utf16.DecodeRune(r, r2)
				i += 6
			}
			d = utf8.AppendRune(d, r)
			i += 4
		default:
			return nil, p.fail(ErrSyntax, i, "invalid escape in string")
		}
		i += 2
		run = i
	}
	p.pos = i + 1
	decoded := d[base:]
	if isName {
		p.names = d
	} else {
		p.dec = d
	}
	start := len(p.buf)
	p.buf = appendQuoted(p.buf, decoded)
	p.addScalar(false, start, len(p.buf))
	return decoded, nil
}

// hex4 decodes the four hex digits at s[i:i+4].
func hex4(s []byte, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range s[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// appendQuoted appends the canonical JSON string for the valid UTF-8 text s.
func appendQuoted(dst, s []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	run := 0
	for i, c := range s {
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[run:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		run = i + 1
	}
	dst = append(dst, s[run:]...)
	return append(dst, '"')
}
