package canon

import (
	"math/big"
	"strconv"
)

// maxSmallExp is the number of significant exponent digits that certainly
// fit, with any adjustment by the length of the input, in an int64.
const maxSmallExp = 18

// number reads a number at p.pos and adds its canonical text as a node.
func (p *parser) number() error {
	s := p.src
	start := p.pos
	i := start
	neg := s[i] == '-'
	if neg {
		i++
	}
	intStart := i
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && '1' <= s[i] && s[i] <= '9':
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	default:
		return p.failChar(i, "in number")
	}
	intEnd := i
	fracStart, fracEnd := i, i
	if i < len(s) && s[i] == '.' {
		i++
		fracStart = i
		if i >= len(s) || !isDigit(s[i]) {
			return p.failChar(i, "after decimal point in number")
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		fracEnd = i
	}
	expNeg := false
	expStart, expEnd := i, i
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			expNeg = s[i] == '-'
			i++
		}
		expStart = i
		if i >= len(s) || !isDigit(s[i]) {
			return p.failChar(i, "in exponent of number")
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		expEnd = i
	}
	p.pos = i

	intDigits := s[intStart:intEnd]
	// A plain integer is canonical unless it is -0 or has too many digits
	// for plain notation.
	if fracStart == fracEnd && expStart == expEnd && len(intDigits) <= 21 &&
		!(neg && intDigits[0] == '0') {
		p.addScalar(true, start, i)
		return nil
	}
	from := len(p.buf)
	p.buf = appendNumber(p.buf, neg, intDigits, s[fracStart:fracEnd], expNeg, s[expStart:expEnd])
	p.addScalar(false, from, len(p.buf))
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
		e := new(big.Int)
		e.SetString(string(expDigits), 10)
		if expNeg {
			e.Neg(e)
		}
		e.Add(e, big.NewInt(adjust-1))
		dst = append(dst, 'e')
		if e.Sign() >= 0 {
			dst = append(dst, '+')
		}
		return e.Append(dst, 10)
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
