package canon

import (
	"errors"
	"slices"
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
// It says where and why, and wraps one of ErrSyntax, ErrDepth and
// ErrDuplicateKey, so that errors.Is(err, ErrDepth) and the like tell the
// cases apart.
type SyntaxError struct {
	// Offset is the byte offset in the input at which the problem was found.
	// For a duplicate member name it is the offset of the later of the two
	// names.
	Offset int64
	// Msg describes the problem. It quotes at most one byte of the input.
	Msg string
	// Err is the sentinel this error wraps: ErrSyntax, ErrDepth or
	// ErrDuplicateKey.
	Err error
}

// Error returns the message and the offset.
func (e *SyntaxError) Error() string {
	return "canon: " + e.Msg + " at offset " + strconv.FormatInt(e.Offset, 10)
}

// Unwrap returns the sentinel error, for errors.Is.
func (e *SyntaxError) Unwrap() error { return e.Err }

// JSON returns the canonical form of the JSON document src, as described in
// the package documentation. src is not modified and is not retained. On
// failure it returns nil and a *SyntaxError.
func JSON(src []byte, opts Options) ([]byte, error) {
	p := getParser(src, opts)
	defer putParser(p)
	if err := p.parse(); err != nil {
		return nil, err
	}
	return p.emit(make([]byte, 0, p.nodes[0].size)), nil
}

// AppendJSON appends the canonical form of the JSON document src to dst and
// returns the extended buffer. It grows dst at most once. On failure it
// returns dst unchanged and a *SyntaxError. src must not share memory with
// the unused capacity of dst.
func AppendJSON(dst, src []byte, opts Options) ([]byte, error) {
	p := getParser(src, opts)
	defer putParser(p)
	if err := p.parse(); err != nil {
		return dst, err
	}
	return p.emit(slices.Grow(dst, p.nodes[0].size)), nil
}

var parserPool = sync.Pool{New: func() any { return new(parser) }}

// Buffers bigger than these are dropped rather than pooled, so that one huge
// document does not pin its memory.
const (
	maxPooledNodes = 1 << 14
	maxPooledBytes = 1 << 18
)

func getParser(src []byte, opts Options) *parser {
	p := parserPool.Get().(*parser)
	p.src = src
	p.pos = 0
	p.maxDepth = opts.MaxDepth
	if p.maxDepth <= 0 {
		p.maxDepth = DefaultMaxDepth
	}
	p.omit = opts.Omit
	p.nodes = p.nodes[:0]
	p.order = p.order[:0]
	p.members = p.members[:0]
	p.stack = p.stack[:0]
	p.names = p.names[:0]
	p.buf = p.buf[:0]
	p.dec = p.dec[:0]
	p.emitStack = p.emitStack[:0]
	return p
}

func putParser(p *parser) {
	if cap(p.nodes) > maxPooledNodes || cap(p.members) > maxPooledNodes ||
		cap(p.order) > maxPooledNodes || cap(p.stack) > maxPooledNodes ||
		cap(p.buf) > maxPooledBytes || cap(p.names) > maxPooledBytes ||
		cap(p.dec) > maxPooledBytes || cap(p.emitStack) > maxPooledNodes {
		return
	}
	// Drop every reference into the caller's memory. Members and frames
	// beyond the lengths were cleared when their objects closed.
	p.src = nil
	p.omit = nil
	clear(p.members)
	clear(p.stack)
	parserPool.Put(p)
}
