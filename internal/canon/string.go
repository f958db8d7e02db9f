package canon

import (
	"unicode/utf16"
	"unicode/utf8"
)

// str reads (in pass 1) the string whose opening quote is at p.pos and
// returns the length of its canonical text and whether it has escapes.
func (p *parser) str() (n int, escaped bool, err error) {
	s := p.src
	start := p.pos
	i := start + 1
	for {
		if i = skipSafe(s, i); i >= len(s) {
			break
		}
		c := s[i]
		switch {
		case c == '"':
			// No escapes: the source text is already canonical.
			p.pos = i + 1
			return p.pos - start, false, nil
		case c == '\\':
			n, err := p.strEscaped(i)
			return n, true, err
		case c < 0x20:
			return 0, false, p.fail(ErrSyntax, i, "invalid control character in string")
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			return 0, false, p.fail(ErrSyntax, i, "invalid UTF-8 in string")
		}
		i += size
	}
	return 0, false, p.fail(ErrSyntax, len(s), "unexpected end of input in string")
}

// strEscaped finishes reading a string whose first backslash is at i, and
// returns the length of its canonical text.
func (p *parser) strEscaped(i int) (int, error) {
	s := p.src
	n := i - p.pos // the opening quote and what precedes the backslash
	for {
		if i >= len(s) {
			return 0, p.fail(ErrSyntax, i, "unexpected end of input in string")
		}
		c := s[i]
		if safe[c] {
			i++
			n++
			continue
		}
		if c == '"' {
			break
		}
		if c < 0x20 {
			return 0, p.fail(ErrSyntax, i, "invalid control character in string")
		}
		if c >= 0x80 {
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				return 0, p.fail(ErrSyntax, i, "invalid UTF-8 in string")
			}
			i += size
			n += size
			continue
		}
		// c == '\\'
		if i+1 >= len(s) {
			return 0, p.fail(ErrSyntax, i+1, "unexpected end of input in string escape")
		}
		r, width := unescape(s, i)
		switch width {
		case 0:
			return 0, p.fail(ErrSyntax, i, "invalid escape in string")
		case -1:
			return 0, p.fail(ErrSyntax, i, `invalid \u escape in string`)
		case -2:
			return 0, p.fail(ErrSyntax, i, "lone surrogate escape in string")
		}
		n += quotedLen(r)
		i += width
	}
	p.pos = i + 1
	return n + 1, nil
}

// unescape decodes the escape sequence at s[i], a backslash, and returns
// the character and the length of the sequence. For a bad sequence the
// length is 0 (unknown escape), -1 (bad \u escape) or -2 (lone surrogate).
func unescape(s []byte, i int) (r rune, width int) {
	switch s[i+1] {
	case '"', '\\', '/':
		return rune(s[i+1]), 2
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		r, ok := hex4(s, i+2)
		if !ok {
			return 0, -1
		}
		if !utf16.IsSurrogate(r) {
			return r, 6
		}
		r2, ok := rune(0), false
		if r < 0xdc00 && i+11 < len(s) && s[i+6] == '\\' && s[i+7] == 'u' {
			r2, ok = hex4(s, i+8)
		}
		if !ok || r2 < 0xdc00 || r2 > 0xdfff {
			return 0, -2
		}
		return utf16.DecodeRune(r, r2), 12
	}
	return 0, 0
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

// quotedLen returns the length of the canonical text of the character r
// inside a string.
func quotedLen(r rune) int {
	switch {
	case r == '"' || r == '\\' || r == '\b' || r == '\f' || r == '\n' || r == '\r' || r == '\t':
		return 2
	case r < 0x20:
		return 6
	}
	return utf8.RuneLen(r)
}

// appendQuotedRune appends the canonical text of the character r inside a
// string.
func appendQuotedRune(dst []byte, r rune) []byte {
	const hex = "0123456789abcdef"
	switch r {
	case '"', '\\':
		return append(dst, '\\', byte(r))
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	if r < 0x20 {
		return append(dst, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xf])
	}
	return utf8.AppendRune(dst, r)
}

// emitString appends (in pass 2) the canonical text of the string at p.pos,
// which pass 1 found valid.
func (p *parser) emitString(dst []byte) []byte {
	s := p.src
	start := p.pos
	i := quoteOrBackslash(s, start+1)
	if s[i] == '"' {
		p.pos = i + 1
		return p.appendRaw(dst, s[start:p.pos])
	}
	run := start // start of the pending run of bytes copied as they are
	for {
		i = quoteOrBackslash(s, i)
		if s[i] == '"' {
			break
		}
		dst = append(dst, s[run:i]...)
		r, width := unescape(s, i)
		dst = appendQuotedRune(dst, r)
		i += width
		run = i
		if p.w != nil && len(dst) >= chunkSize {
			dst = p.flush(dst)
		}
	}
	p.pos = i + 1
	return append(dst, s[run:p.pos]...)
}

// cmpNames compares the decoded member names whose opening quotes are at a
// and b in src, which pass 1 has read.
func (p *parser) cmpNames(a, b int) int {
	s := p.src
	i, j := a+1, b+1
	for s[i] == s[j] && s[i] != '"' && s[i] != '\\' {
		i++
		j++
	}
	ca, cb := s[i], s[j]
	if ca == '\\' || cb == '\\' {
		// Equal so far as decoded text too: compare the rest decoded.
		ra, rb := nameReader{s: s, i: i}, nameReader{s: s, i: j}
		for {
			ca, okA := ra.next()
			cb, okB := rb.next()
			switch {
			case !okA || !okB:
				return cmpBool(okA, okB)
			case ca != cb:
				return cmpByte(ca, cb)
			}
		}
	}
	switch {
	case ca == cb: // both '"'
		return 0
	case ca == '"':
		return -1
	case cb == '"':
		return 1
	}
	return cmpByte(ca, cb)
}

func cmpByte(a, b byte) int {
	if a < b {
		return -1
	}
	return 1
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case b:
		return -1
	}
	return 1
}

// nameReader yields the decoded bytes of a string that pass 1 found valid,
// from s[i] to its closing quote.
type nameReader struct {
	s    []byte
	i    int
	buf  [utf8.UTFMax]byte
	n, k int // buf[k:n] are pending bytes of a decoded escape
}

func (r *nameReader) next() (byte, bool) {
	if r.k < r.n {
		r.k++
		return r.buf[r.k-1], true
	}
	c := r.s[r.i]
	switch c {
	case '"':
		return 0, false
	case '\\':
		ch, width := unescape(r.s, r.i)
		r.i += width
		r.n = utf8.EncodeRune(r.buf[:], ch)
		r.k = 1
		return r.buf[0], true
	}
	r.i++
	return c, true
}
