// Package jsoncanon is the canonical JSON form the HTTP middleware
// fingerprints request bodies with, for adapters outside this module (the
// mcpmw module fingerprints MCP tool arguments with it): two documents that
// mean the same (members reordered, re-indented, strings escaped
// differently, 1.0 and 1) give the same bytes, and a change to any value
// changes them. It is the public face of the canonicaliser the middleware
// uses (an internal package), so that every adapter fingerprints JSON
// alike; Canonical's documentation gives the rules.
//
// The form is RFC 8785's (JCS) but for two points: numbers keep their exact
// decimal value (never rounded through float64), and member names sort by
// their UTF-8 bytes. Documents that no single form would represent
// faithfully are refused: duplicate member names, invalid UTF-8 or lone
// surrogates, nesting deeper than Options.MaxDepth.
package jsoncanon

import (
	"io"

	"github.com/idemkey/idemkey/internal/canon"
)

// DefaultMaxDepth is the nesting limit used when Options.MaxDepth is zero.
const DefaultMaxDepth = canon.DefaultMaxDepth

// Options adjusts the canonical form. The zero value gives the defaults.
type Options struct {
	// MaxDepth is how many arrays and objects may be open at once: 1
	// allows [1,2] but not [[1]]. Deeper input fails with an error
	// matching ErrDepth. Default: DefaultMaxDepth (64).
	MaxDepth int

	// Omit lists object members left out of the canonical form, each a
	// dotted path of member names from the top-level object down ("ts",
	// "meta.sent_at"), for fields that legitimately differ between two
	// tries of one request. Paths do not go into arrays; an omitted
	// member's value is still checked. Default: none.
	Omit []string
}

// The errors that Canonical and Write return for input they refuse, for
// errors.Is. Every such error is a *SyntaxError wrapping exactly one.
var (
	// ErrSyntax: not JSON (RFC 8259), or a string with invalid UTF-8 or a
	// lone surrogate escape.
	ErrSyntax = canon.ErrSyntax
	// ErrDepth: nested deeper than Options.MaxDepth.
	ErrDepth = canon.ErrDepth
	// ErrDuplicateKey: an object with one member name twice (after
	// unescaping), whose meaning parsers disagree on.
	ErrDuplicateKey = canon.ErrDuplicateKey
	// ErrTooLarge: a document of 4 GiB or more.
	ErrTooLarge = canon.ErrTooLarge
)

// SyntaxError is the error for input that cannot be canonicalised: its
// Offset (in bytes) and Msg say where and why, in words fit to show
// whoever sent the document (they quote at most one byte of it), and it
// wraps one of ErrSyntax, ErrDepth, ErrDuplicateKey and ErrTooLarge.
type SyntaxError = canon.SyntaxError

// Canonical returns the canonical form of the JSON document src. src is
// neither modified nor retained. For input it refuses it returns nil and a
// *SyntaxError. It is safe for concurrent use.
//
// The form has no whitespace outside strings; the members of every object
// sorted by the UTF-8 bytes of their decoded names; array elements in
// order; each string decoded and written one way (\" \\ \b \t \n \f \r,
// other control characters as \u00xx, everything else as raw UTF-8); each
// number as its exact decimal value in ECMAScript's notation (1, 1.0 and
// 10e-1 are all 1; -0 is 0; exponents of any size are kept exactly); true,
// false and null as they are. Canonicalising the result again returns it
// unchanged.
func Canonical(src []byte, opts Options) ([]byte, error) {
	return canon.JSON(src, canon.Options(opts))
}

// Write writes the canonical form of src to w, such as a hash, and returns
// the bytes written. It reads the whole of src before writing anything, so
// for refused input it writes nothing and returns a *SyntaxError; an error
// from w is returned as it is. A large document is written in pieces as it
// is read, never held whole: feeding a hash this way costs the least
// memory. It is safe for concurrent use.
func Write(w io.Writer, src []byte, opts Options) (int64, error) {
	return canon.WriteJSON(w, src, canon.Options(opts))
}
