package canon

import (
	"errors"
	"io"
	"strconv"
	"sync"
)

// DefaultMaxDepth is the nesting limit used when Options.MaxDepth is zero or
// negative.
const DefaultMaxDepth = 64

// Options adjusts how JSON and AppendJSON canonicalise. The zero value gives
// the defaults.
type Options struct {
	// MaxDepth is how many arrays and objects may be open at once: 1 allows
	// [1,2] but not [[1]], and a top-level string or number has depth 0.
	// Deeper input fails with ErrDepth. Zero or a negative value means the
	// default. Default: 64.
	MaxDepth int

	// Omit lists object members to leave out of the canonical form, each as
	// a dotted path of decoded member names from the top-level object down,
	// such as "ts" or "meta.client_time". Paths do not go into arrays. See
	// the package documentation for the details. Default: none.
	Omit []string
}

// ErrSyntax is wrapped by the error for input that is not valid JSON, or that
// holds invalid UTF-8 or a lone surrogate escape in a string.
var ErrSyntax = errors.New("canon: invalid JSON")

// ErrDepth is wrapped by the error for input that nests arrays and objects
// deeper than Options.MaxDepth.
var ErrDepth = errors.New("canon: JSON nested too deeply")

// ErrDuplicateKey is wrapped by the error for input with an object that has
// two members of the same name, compared after unescaping.
var ErrDuplicateKey = errors.New("canon: duplicate object member name")

// SyntaxError is the error returned for input that cannot be canonicalised.
// It says where and why, and wraps one of ErrSyntax, ErrDepth,
// ErrDuplicateKey and ErrTooLarge, so that errors.Is(err, ErrDepth) and the
// like tell the cases apart. Its Error method prefixes the package name, as
// Go errors do; Msg and Offset alone are what to show to whoever sent the
// document.
type SyntaxError struct {
	// Offset is the byte offset in the input at which the problem was found.
	// For a duplicate member name it is the offset of the later of the two
	// names.
	Offset int64
	// Msg describes the problem, such as "unexpected end of input in
	// object", without naming a package. It quotes at most one byte of the
	// input.
	Msg string
	// Err is the sentinel this error wraps: ErrSyntax, ErrDepth,
	// ErrDuplicateKey or ErrTooLarge.
	Err error
}

// Error returns the message and the offset.
func (e *SyntaxError) Error() string {
	return "canon: " + e.Msg + " at offset " + strconv.FormatInt(e.Offset, 10)
}

// Unwrap returns the sentinel error, for errors.Is.
func (e *SyntaxError) Unwrap() error { return e.Err }

// ErrTooLarge is wrapped by the error for a document of 4 GiB or more: the
// package records offsets into the input in 32 bits to keep its working
// memory small.
var ErrTooLarge = errors.New("canon: JSON document too large")

// maxLen is one more than the length of the longest document accepted.
const maxLen = 1<<32 - 1

// JSON returns the canonical form of the JSON document src, as described in
// the package documentation. src is not modified and is not retained. On
// failure it returns nil and a *SyntaxError.
func JSON(src []byte, opts Options) ([]byte, error) {
	return canonical(src, opts, useDirect(src, opts))
}

// useDirect reports whether src is read directly (see parse.go): when it is
// small, and nests no deeper than the default limit, since an object put in
// order is copied once for each object around it that is put in order too.
func useDirect(src []byte, opts Options) bool {
	return len(src) <= directMax && opts.MaxDepth <= DefaultMaxDepth
}

func canonical(src []byte, opts Options, direct bool) ([]byte, error) {
	p := getParser(src, opts, direct)
	defer putParser(p)
	if err := p.run(); err != nil {
		return nil, err
	}
	if p.direct {
		out := make([]byte, len(p.out))
		if testHook != nil {
			testHook(cap(out))
		}
		copy(out, p.out)
		return out, nil
	}
	out := make([]byte, 0, p.size)
	if testHook != nil {
		testHook(cap(out))
	}
	out, _ = p.emit(out, nil)
	return out, nil
}

// AppendJSON appends the canonical form of the JSON document src to dst and
// returns the extended buffer. It grows dst at most once. On failure it
// returns dst unchanged and a *SyntaxError. src must not share memory with
// the unused capacity of dst.
func AppendJSON(dst, src []byte, opts Options) ([]byte, error) {
	return appendJSON(dst, src, opts, useDirect(src, opts))
}

func appendJSON(dst, src []byte, opts Options, direct bool) ([]byte, error) {
	p := getParser(src, opts, direct)
	defer putParser(p)
	if err := p.run(); err != nil {
		return dst, err
	}
	if p.direct {
		return append(grow(dst, len(p.out)), p.out...), nil
	}
	out, _ := p.emit(grow(dst, p.size), nil)
	return out, nil
}

// WriteJSON writes the canonical form of the JSON document src to w and
// returns the number of bytes written. It reads the whole of src before it
// writes anything, so for bad input it writes nothing and returns a
// *SyntaxError. An error from w ends the writing and is returned as it is.
// A large document is written in pieces of a few kilobytes as it is read a
// second time, so that its canonical form is never held in memory: feeding
// a hash this way costs the least memory (see the package documentation).
func WriteJSON(w io.Writer, src []byte, opts Options) (int64, error) {
	return writeJSON(w, src, opts, useDirect(src, opts))
}

func writeJSON(w io.Writer, src []byte, opts Options, direct bool) (int64, error) {
	p := getParser(src, opts, direct)
	defer putParser(p)
	if err := p.run(); err != nil {
		return 0, err
	}
	if p.direct {
		p.w = w
		p.write(p.out)
		return p.written, p.err
	}
	buf, err := p.emit(p.chunk[:0], w)
	p.chunk = buf[:0]
	return p.written, err
}

var parserPool = sync.Pool{New: func() any { return new(parser) }}

// Buffers bigger than these are dropped rather than pooled, so that one huge
// document does not pin its memory. A document read directly fits.
const (
	maxPooledEntries = directMax / 4
	maxPooledBytes   = 2 * directMax
)

func getParser(src []byte, opts Options, direct bool) *parser {
	p := parserPool.Get().(*parser)
	p.src = src
	p.maxDepth = opts.MaxDepth
	if p.maxDepth <= 0 {
		p.maxDepth = DefaultMaxDepth
	}
	p.omit = opts.Omit
	p.w = nil
	p.written = 0
	p.err = nil
	p.start(direct)
	return p
}

// start prepares p to read p.src from the beginning.
func (p *parser) start(direct bool) {
	p.direct = direct
	p.pos = 0
	p.size = 0
	p.stack = p.stack[:0]
	p.members = p.members[:0]
	p.path = p.path[:0]
	p.blocks = p.blocks[:0]
	p.index = p.index[:0]
	p.omitted = p.omitted[:0]
	p.estack = p.estack[:0]
	p.out = p.out[:0]
	if direct {
		// Only numbers make the canonical form longer than the input, and
		// run starts over in two passes rather than grow this.
		p.out = grow(p.out, len(p.src)+len(p.src)/8+64)
	}
	p.outs = p.outs[:0]
}

// run reads the document. A document read directly is read again in two
// passes if its canonical form turns out more than an eighth longer than
// itself (only numbers grow, as 1e20 does to 21 digits), or if it has an
// object with more members than one per 16 bytes of input: so that reading
// directly holds less than 4 bytes per input byte.
func (p *parser) run() error {
	err := p.parse()
	if err == errLong {
		p.out, p.outs, p.perm, p.tmp = nil, nil, nil, nil
		p.start(false)
		err = p.parse()
	}
	return err
}

func putParser(p *parser) {
	if cap(p.stack) > maxPooledEntries || cap(p.members) > maxPooledEntries ||
		cap(p.index) > maxPooledEntries || cap(p.omitted) > maxPooledEntries ||
		cap(p.estack) > maxPooledEntries || cap(p.path) > maxPooledEntries ||
		cap(p.blocks) > maxPooledBytes || cap(p.scratch) > maxPooledBytes ||
		cap(p.chunk) > maxPooledBytes || cap(p.out) > maxPooledBytes ||
		cap(p.tmp) > maxPooledBytes || cap(p.outs) > maxPooledEntries || cap(p.perm) > maxPooledEntries {
		return
	}
	for i := range p.pathBuf {
		if cap(p.pathBuf[i]) > maxPooledBytes {
			return
		}
	}
	// Drop every reference into the caller's memory.
	p.src = nil
	p.omit = nil
	p.w = nil
	p.err = nil
	clear(p.path[:cap(p.path)])
	parserPool.Put(p)
}
