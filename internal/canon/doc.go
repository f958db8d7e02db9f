// Package canon turns a JSON document into a canonical byte string, so that
// the bodies of two HTTP requests can be compared by fingerprint: bodies that
// mean the same (members reordered, re-indented, escaped differently) give the
// same canonical bytes, and a change to any value changes them.
//
// JSON returns the canonical form of a document, AppendJSON appends it to a
// buffer and WriteJSON writes it to an io.Writer such as a hash. They read
// the input without recursion, never convert numbers to floating point, and
// allocate nothing but JSON's result once their internal buffers have warmed
// up (for documents up to 64 KiB, whose buffers are kept for reuse). All
// are safe for concurrent use.
//
// # Canonical form
//
// The canonical form is itself valid JSON (RFC 8259), and canonicalising it
// again returns it unchanged. It is built by these rules:
//
//   - There is no whitespace outside strings.
//   - The members of every object, at every level, are sorted by name, and
//     names are compared bytewise as the UTF-8 bytes of the decoded
//     (unescaped) name. This differs from RFC 8785 (JCS), which compares
//     UTF-16 code units; the two orders differ only where, at the first character
//     in which two names differ, one has a character above U+FFFF and the
//     other one from U+E000 to U+FFFF.
//   - Array elements keep their order.
//   - A string is decoded and then written in one way: '"' and '\' are
//     escaped as \" and \\, the control characters U+0008, U+0009, U+000A,
//     U+000C and U+000D as \b, \t, \n, \f and \r, the other control
//     characters below U+0020 as \u00xx with lower-case hex digits, and every
//     other character, U+007F and above included, as its raw UTF-8 bytes.
//     So "\u00e9" and "é" agree, as do "\/" and "/". These are the string
//     rules of RFC 8785.
//   - A number is written as its exact decimal value, never through float64,
//     so 12345678901234567890123 and 12345678901234567890124 stay apart.
//     Numbers with the same value agree: 1, 1.0, 1e0, 10e-1 and 0.1E1 are all
//     written 1, and -0, 0.0 and 0e9 are all written 0 (negative zero is
//     taken to be zero). The value's significant digits d1 d2 ... dk (with no
//     leading or trailing zeros) and its decimal exponent n (value =
//     0.d1d2...dk × 10^n) choose the notation as ECMAScript's
//     Number.prototype.toString does: if k ≤ n ≤ 21, the digits followed by
//     n-k zeros (1e3 is 1000); if 0 < n ≤ 21, the digits with a decimal point
//     after the first n (1234.5); if -6 < n ≤ 0, "0." followed by -n zeros
//     and the digits (0.00012); otherwise exponent notation, d1, then "."
//     and the other digits if k > 1, then "e", the sign of n-1 ("+" or "-")
//     and the digits of |n-1| (1e+21, 1.5e-7, 1.2345678901234567890123e+22).
//     Exponents of any size are exact: 1e999999999999999999999 is kept as
//     1e+999999999999999999999 and never expanded.
//   - true, false and null are written as they are.
//
// Any JSON value may be the top-level value.
//
// # Rejected input
//
// Besides what RFC 8259 forbids (empty input, trailing commas, single quotes,
// NaN, leading zeros such as 01, 1., .5, +1, unescaped control characters in
// strings, anything after the top-level value, and so on), these valid or
// arguably valid documents are refused, because no single canonical form
// would be faithful to them:
//
//   - Objects with the same member name twice (after unescaping, so "a" and
//     "\u0061" are the same name): RFC 8259 leaves their meaning
//     unpredictable, and parsers differ in keeping the first or the last
//     value, so a fingerprint that kept one would let two different requests
//     look the same. This applies to members left out by Options.Omit too.
//   - Strings that are not valid UTF-8, including UTF-8 encoded surrogates,
//     and \u escapes that encode a lone surrogate (a \uD800-\uDBFF escape not
//     followed by a \uDC00-\uDFFF escape, or a \uDC00-\uDFFF escape on its
//     own). Replacing them, as encoding/json does with U+FFFD, would merge
//     different inputs.
//   - Arrays and objects nested deeper than Options.MaxDepth. The input is
//     read without recursion and the check fails as soon as the limit is
//     passed, so a "depth bomb" of a million '[' is refused after reading
//     only MaxDepth+1 bytes of it.
//
// # Errors
//
// Every error returned for bad input is a *SyntaxError carrying the byte
// offset at which the problem was found and a reason (its Msg field) that
// names no package, fit to show to whoever sent the document. It wraps
// exactly one of ErrSyntax, ErrDepth, ErrDuplicateKey and ErrTooLarge (for a
// document of 4 GiB or more), so callers can tell the cases apart with
// errors.Is. The reason never quotes member names or string values from the
// input, only at most the single offending byte, so it is safe to log.
//
// # Memory
//
// A document of up to 64 KiB that nests no deeper than DefaultMaxDepth is
// read once, its canonical form written as it goes; an object whose members
// come out of order is put in order when it closes, by copying its members'
// text. Others, and the few small documents that would cost more that way
// (numbers that grow, such as 1e20 to 21 digits; an object with more than
// one member per 16 bytes), are read twice: the first pass checks the
// document and records where the members of each out-of-order object go, in
// a few bytes per member, and the second writes the canonical form. Array
// elements, strings and numbers cost nothing either way. The peak of the
// memory used, the result of JSON included, stays under 4 bytes per input
// byte (about 2.2 at most for the shapes of document in the package's
// tests), or under 4 bytes besides the result when the canonical form is
// longer than twice the input. WriteJSON never holds a large document's
// canonical form, so feeding a hash with it costs the least.
//
// # Omitting members
//
// Options.Omit names object members to leave out of the canonical form, such
// as a client-side timestamp or nonce. An entry is a dotted path of member
// names matched against decoded names from the top-level object down: "ts"
// is the member ts of the top-level object, "meta.ts" the member ts of the
// object that is the value of the top-level member meta. Paths only go
// through objects: members of objects inside arrays are never omitted, and a
// name that itself contains '.' cannot be named. An omitted member's value is
// still checked like the rest of the document.
package canon
