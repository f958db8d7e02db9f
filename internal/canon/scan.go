package canon

import (
	"encoding/binary"
	"math/bits"
)

// Strings are most of a typical document, so both passes look at them
// eight bytes at a time, with the usual bit tricks: for a word x,
// (x - ones*n) &^ x & highs has the high bit of every byte below n set (and
// perhaps others above the first such byte), for n <= 0x80.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// skipSafe returns the index of the first byte from s[i] on that is not
// printable ASCII other than '"' and '\', or len(s).
func skipSafe(s []byte, i int) int {
	for i+8 <= len(s) {
		x := binary.LittleEndian.Uint64(s[i:])
		q := x ^ ones*'"'
		b := x ^ ones*'\\'
		if ((x-ones*0x20)&^x|(q-ones)&^q|(b-ones)&^b|x)&highs != 0 {
			break
		}
		i += 8
	}
	for i < len(s) && safe[s[i]] {
		i++
	}
	return i
}

// quoteOrBackslash returns the index of the first '"' or '\' from s[i] on,
// or len(s).
func quoteOrBackslash(s []byte, i int) int {
	for i+8 <= len(s) {
		x := binary.LittleEndian.Uint64(s[i:])
		q := x ^ ones*'"'
		b := x ^ ones*'\\'
		// The lowest byte flagged is exact; only bytes above it may not be.
		if t := ((q-ones)&^q | (b-ones)&^b) & highs; t != 0 {
			return i + bits.TrailingZeros64(t)/8
		}
		i += 8
	}
	for i < len(s) && s[i] != '"' && s[i] != '\\' {
		i++
	}
	return i
}
