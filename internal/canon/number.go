package canon

import (
	"errors"
	"strconv"
)

// maxSmallExp is the number of significant exponent digits that certainly
// fit, with any adjustment by the length of the input, in an int64.
const maxSmallExp = 18

// num is a number as read from src: the offsets of its digits.
type num struct {
	neg, expNeg        bool
	intStart, intEnd   int
	fracStart, fracEnd int // equal if there is no fraction
	expStart, expEnd   int // equal if there is no exponent
	end                int
}

// scanNumber reads the number that starts at s[i]. If it is malformed, it
// returns the offset of the first byte that does not fit and what was being
// read there.
func scanNumber(s []byte, i int) (n num, errOff int, context string) {
	n.neg = s[i] == '-'
	if n.neg {
		i++
	}
	n.intStart = i
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && '1' <= s[i] && s[i] <= '9':
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	default:
		return n, i, "in number"
	}
	n.intEnd = i
	n.fracStart, n.fracEnd = i, i
	if i < len(s) && s[i] == '.' {
		i++
		n.fracStart = i
		if i >= len(s) || !isDigit(s[i]) {
			return n, i, "after decimal point in number"
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		n.fracEnd = i
	}
	n.expStart, n.expEnd = i, i
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			n.expNeg = s[i] == '-'
			i++
		}
		n.expStart = i
		if i >= len(s) || !isDigit(s[i]) {
			return n, i, "in exponent of number"
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		n.expEnd = i
	}
	n.end = i
	return n, 0, ""
}

// plain reports whether the number's source text is canonical: an integer
// other than -0 with digits few enough for plain notation.
func (n *num) plain(s []byte) bool {
	return n.fracStart == n.fracEnd && n.expStart == n.expEnd && n.intEnd-n.intStart <= 21 &&
		!(n.neg && s[n.intStart] == '0')
}

// appendTo appends the number's canonical text.
func (n *num) appendTo(dst, s []byte) []byte {
	return appendNumber(dst, n.neg, s[n.intStart:n.intEnd], s[n.fracStart:n.fracEnd], n.expNeg, s[n.expStart:n.expEnd])
}

// errLong ends reading a document directly: see run.
var errLong = errors.New("canon: read in two passes")

// number reads (in pass 1) the number at p.pos and counts its canonical
// length.
func (p *parser) number() error {
	n, errOff, context := scanNumber(p.src, p.pos)
	if context != "" {
		return p.failChar(errOff, context)
	}
	switch {
	case p.direct && n.plain(p.src):
		p.out = append(p.out, p.src[p.pos:n.end]...)
	case p.direct:
		// The canonical text is at most 25 bytes longer than the source
		// text (1e20 is 21 digits, 1e-6 is 0.000001).
		if len(p.out)+(n.end-p.pos)+25 > cap(p.out) {
			return errLong
		}
		p.out = n.appendTo(p.out, p.src)
	case n.plain(p.src):
		p.size += n.end - p.pos
	default:
		p.scratch = n.appendTo(p.scratch[:0], p.src)
		p.size += len(p.scratch)
	}
	p.pos = n.end
	return nil
}

// appendNumber appends the canonical form of the number with the given sign,
// integer digits, fraction digits and exponent (which may be empty).
func appendNumber(dst []byte, neg bool, intDigits, fracDigits []byte, expNeg bool, expDigits []byte) []byte {
	// The significant digits are c[a..b] of c = intDigits ++ fracDigits.
	li, l := len(intDigits), len(intDigits)+len(fracDigits)
	at := func(k int) byte {
		if k < li {
			return intDigits[k]
		}
		return fracDigits[k-li]
	}
	a := 0
	for a < l && at(a) == '0' {
		a++
	}
	if a == l {
		return append(dst, '0') // zero, whatever its sign and exponent
	}
	b := l - 1
	for at(b) == '0' {
		b--
	}
	k := b - a + 1 // number of significant digits
	// digits appends c[from:to].
	digits := func(dst []byte, from, to int) []byte {
		if from < li {
			dst = append(dst, intDigits[from:min(to, li)]...)
		}
		if to > li {
			dst = append(dst, fracDigits[max(from, li)-li:to-li]...)
		}
		return dst
	}

	for len(expDigits) > 0 && expDigits[0] == '0' {
		expDigits = expDigits[1:]
	}
	// The value is 0.c[a..b] × 10^n with n = exp + li - a.
	adjust := int64(li - a)
	if neg {
		dst = append(dst, '-')
	}
	if len(expDigits) > maxSmallExp {
		// |n| is at least 10^18 - len(src), so exponent notation is due.
		dst = append(dst, at(a))
		if k > 1 {
			dst = append(dst, '.')
			dst = digits(dst, a+1, b+1)
		}
		// |n-1| = |exp| + (adjust-1) for a positive exponent and |exp| -
		// (adjust-1) for a negative one, where |adjust-1| < 2^32 < |exp|,
		// so the sign is the exponent's.
		dst = append(dst, 'e')
		t := adjust - 1
		if expNeg {
			dst = append(dst, '-')
			t = -t
		} else {
			dst = append(dst, '+')
		}
		return appendDecimalSum(dst, expDigits, t)
	}

	var exp int64
	for _, c := range expDigits {
		exp = exp*10 + int64(c-'0')
	}
	if expNeg {
		exp = -exp
	}
	n := exp + adjust
	kk := int64(k)
	switch {
	case kk <= n && n <= 21:
		dst = digits(dst, a, b+1)
		for j := kk; j < n; j++ {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = digits(dst, a, a+int(n))
		dst = append(dst, '.')
		dst = digits(dst, a+int(n), b+1)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for j := n; j < 0; j++ {
			dst = append(dst, '0')
		}
		dst = digits(dst, a, b+1)
	default:
		dst = append(dst, at(a))
		if k > 1 {
			dst = append(dst, '.')
			dst = digits(dst, a+1, b+1)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, n-1, 10)
	}
	return dst
}

// appendDecimalSum appends the decimal digits of d + t, where d is a string
// of digits without leading zeros and t is so much smaller that d + t keeps
// all but at most d's top digit (the caller's d is at least 10^18 and |t|
// below 2^32; a t with more digits than d is not added right). It
// never makes dst longer than the result, so that an exactly sized buffer
// does not grow: a sum that loses its top digit (a borrow out of a leading
// 1, as 1000 - 2) is written one digit shorter from the start.
func appendDecimalSum(dst, d []byte, t int64) []byte {
	u := uint64(t)
	if t < 0 {
		u = uint64(-t)
	}
	shorter := t < 0 && len(d) > 1 && d[0] == '1' && lessThan(d[1:], u)
	if shorter {
		d = d[1:] // the borrow out of the top is the leading 1's
	}
	start := len(dst)
	dst = append(dst, d...)
	carry := 0 // +1 carry, -1 borrow
	for i := len(dst) - 1; u > 0 || carry != 0; i-- {
		if i < start {
			if shorter { // the borrow taken from the leading 1
				break
			}
			// A carry out of the top digit.
			dst = append(dst, 0)
			copy(dst[start+1:], dst[start:])
			dst[start] = '1'
			break
		}
		v := int(dst[i]-'0') + carry
		if t < 0 {
			v -= int(u % 10)
		} else {
			v += int(u % 10)
		}
		u /= 10
		switch {
		case v < 0:
			v, carry = v+10, -1
		case v > 9:
			v, carry = v-10, 1
		default:
			carry = 0
		}
		dst[i] = byte('0' + v)
	}
	k := start
	for dst[k] == '0' {
		k++
	}
	return append(dst[:start], dst[k:]...)
}

// lessThan reports whether the decimal digits d are a number below u.
func lessThan(d []byte, u uint64) bool {
	for len(d) > 0 && d[0] == '0' {
		d = d[1:]
	}
	if len(d) > 19 { // 10^19 is above every uint64 t can give
		return false
	}
	var v uint64
	for _, c := range d {
		v = v*10 + uint64(c-'0')
	}
	return v < u
}
