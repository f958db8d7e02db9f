package canon

import (
	"encoding/binary"
	"io"
	"math/bits"
	"runtime"
	"slices"
	"strconv"
	"unsafe"
)

// The parser reads src without recursion, in one of two ways.
//
// Directly (p.direct, for documents up to directMax bytes): parse writes
// the canonical form to p.out as it reads. Objects whose members turn out
// to be out of order are put in order when they close, by copying their
// members' text in sorted order through p.tmp; p.outs says where each
// member's text starts. Omitted members are written and then cut off.
//
// In two passes (larger documents): parse (pass 1) validates the whole
// document and computes the exact size of its canonical form, keeping only
// what pass 2 cannot see again on its own: for each object whose members
// are not already in order, where its members are in sorted order (p.blocks,
// found through p.index), and where the members left out by Options.Omit
// are (p.omitted). emit (pass 2, in emit.go) reads src again and writes the
// canonical form: arrays and objects already in order straight through, the
// others member by member in the order pass 1 recorded. So the memory used
// is a few bytes per member of an unordered object, and nothing per array
// element, string or number; output aside, which WriteJSON never holds.
//
// Either way, while an object is open its members are a list of 4-byte
// offsets (p.members), and their names are compared where they stand in
// src. Direct reading is faster, as nothing is read twice, but holds the
// output twice and 12 bytes per member while their object is open.

// directMax is the size of the largest document read directly.
const directMax = 64 << 10

// frame is an array or object open in pass 1.
type frame struct {
	open    uint32 // offset of the opening bracket
	base    uint32 // object: index in members of its first member
	nOmit   uint32 // object: number of its members omitted
	object  bool
	live    bool   // object: Omit entries may match its members
	descend bool   // object: Omit entries may match inside the current member's value
	omitCur bool   // object: the current member is omitted
	sorted  bool   // object: the member names so far are in strictly increasing order
	muted   bool   // inside an omitted member's value: written nowhere
	written bool   // object: a member has been written (the next needs a comma)
	outOpen uint32 // direct: offset in out of the opening bracket
}

// entry locates the block of an unordered object: see parse.
type entry struct {
	open  uint32 // offset of the object's '{'
	block uint32 // offset in blocks
}

// span is an omitted member: from its name to the end of its value.
type span struct{ off, end uint32 }

type parser struct {
	src      []byte
	pos      int
	maxDepth int
	omit     []string
	size     int // pass 1: length of the canonical form counted so far

	stack   []frame
	members []uint32 // name offsets of the members of open objects
	path    [][]byte // decoded name of the current member of each live object
	pathBuf [][]byte // storage for path entries that had escapes
	// blocks holds, for each unordered object, as uvarints: the offset of
	// its '}' and the number of members written, both relative to its '{',
	// then the offsets of those members' names, relative too, in sorted
	// order.
	blocks   []byte
	index    []entry // one per block, sorted by open after pass 1
	omitted  []span  // in source order
	omitSize int     // size before the current omitted member, or len(out) directly
	scratch  []byte  // a number's canonical text, to count its length

	// direct reading
	direct bool
	out    []byte
	outs   []uint32 // offset in out of the text of each member in members
	perm   []uint32 // scratch: an object's members in sorted order
	tmp    []byte   // scratch: an object's members' text in sorted order

	// pass 2
	estack  []eframe
	w       io.Writer
	written int64
	err     error // from w
	chunk   []byte
}

// safe reports the bytes that stand for themselves both inside a JSON string
// and in its canonical form: printable ASCII other than '"' and '\'.
var safe = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func (p *parser) skipWS() {
	if p.pos < len(p.src) && p.src[p.pos] > ' ' {
		return
	}
	p.skipWSSlow()
}

func (p *parser) skipWSSlow() {
	s := p.src
	i := p.pos
	for i < len(s) {
		switch s[i] {
		case ' ', '\t', '\r':
			i++
		case '\n':
			// Indentation follows: skip its spaces a word at a time.
			i++
			for i+8 <= len(s) {
				if y := binary.LittleEndian.Uint64(s[i:]) ^ ones*' '; y != 0 {
					i += bits.TrailingZeros64(y) / 8
					break
				}
				i += 8
			}
		default:
			p.pos = i
			return
		}
	}
	p.pos = i
}

func (p *parser) fail(sentinel error, off int, msg string) error {
	return &SyntaxError{Offset: int64(off), Msg: msg, Err: sentinel}
}

// failChar reports the byte at off, which was not expected in context.
func (p *parser) failChar(off int, context string) error {
	if off >= len(p.src) {
		return p.fail(ErrSyntax, off, "unexpected end of input "+context)
	}
	c := p.src[off]
	var what string
	if c >= 0x20 && c < 0x7f {
		what = "character " + strconv.QuoteRune(rune(c))
	} else {
		what = "byte 0x" + strconv.FormatUint(uint64(c), 16)
	}
	return p.fail(ErrSyntax, off, "invalid "+what+" "+context)
}

// parse is pass 1: it reads the whole of src.
func (p *parser) parse() error {
	if uint64(len(p.src)) >= maxLen {
		return p.fail(ErrTooLarge, 0, "document of 4 GiB or more")
	}
	for {
		opened, err := p.value()
		if err != nil {
			return err
		}
		if opened {
			continue // the first element or member value comes next
		}
		// A value is complete: close containers and pass separators until
		// another value is due.
		for {
			if len(p.stack) == 0 {
				p.skipWS()
				if p.pos < len(p.src) {
					return p.failChar(p.pos, "after top-level value")
				}
				p.finish()
				return nil
			}
			f := &p.stack[len(p.stack)-1]
			if f.omitCur {
				// Only omitted members' values end here with omitCur
				// set; forget their text and remember where they are.
				if p.direct {
					p.out = p.out[:p.omitSize]
				} else {
					p.size = p.omitSize
					p.omitted = append(grow(p.omitted, 1), span{p.members[len(p.members)-1], uint32(p.pos)})
				}
				f.omitCur = false
			}
			p.skipWS()
			if p.pos >= len(p.src) {
				return p.failChar(p.pos, "in "+containerName(f.object))
			}
			c := p.src[p.pos]
			if c == ',' {
				p.pos++
				if f.object {
					if err := p.member(); err != nil {
						return err
					}
				} else if p.direct {
					p.out = append(p.out, ',')
				} else {
					p.size++
				}
				break
			}
			if f.object && c == '}' || !f.object && c == ']' {
				p.pos++
				if err := p.close(); err != nil {
					return err
				}
				continue
			}
			if f.object {
				return p.failChar(p.pos, "after object member value")
			}
			return p.failChar(p.pos, "after array element")
		}
	}
}

// finish sorts the index for pass 2's binary search. Blocks are recorded as
// objects close, so an object's block comes after those of the objects
// inside it.
func (p *parser) finish() {
	if !slices.IsSortedFunc(p.index, cmpEntry) {
		slices.SortFunc(p.index, cmpEntry)
	}
}

func cmpEntry(a, b entry) int {
	switch {
	case a.open < b.open:
		return -1
	case a.open > b.open:
		return 1
	}
	return 0
}

func containerName(object bool) string {
	if object {
		return "object"
	}
	return "array"
}

// value reads a value. For a non-empty array or object it reads only the
// opening bracket (and, for an object, the first member's name) and reports
// opened; otherwise it reads the whole value.
func (p *parser) value() (opened bool, err error) {
	p.skipWS()
	if p.pos >= len(p.src) {
		return false, p.failChar(p.pos, "looking for beginning of value")
	}
	switch c := p.src[p.pos]; c {
	case '{', '[':
		if len(p.stack) >= p.maxDepth {
			return false, p.fail(ErrDepth, p.pos, "nesting deeper than "+strconv.Itoa(p.maxDepth))
		}
		object := c == '{'
		end := byte(']')
		live, muted := false, false
		if len(p.stack) == 0 {
			live = object && len(p.omit) > 0
		} else {
			parent := &p.stack[len(p.stack)-1]
			live = object && parent.object && parent.descend
			muted = parent.muted || parent.omitCur
		}
		if object {
			end = '}'
		}
		p.stack = append(grow(p.stack, 1), frame{
			open: uint32(p.pos), base: uint32(len(p.members)),
			object: object, live: live, muted: muted, sorted: true,
			outOpen: uint32(len(p.out)),
		})
		if p.direct {
			p.out = append(p.out, c)
		} else {
			p.size++
		}
		p.pos++
		p.skipWS()
		if p.pos < len(p.src) && p.src[p.pos] == end {
			p.pos++
			return false, p.close()
		}
		if object {
			return true, p.member()
		}
		return true, nil
	case '"':
		start := p.pos
		n, escaped, err := p.str()
		switch {
		case err != nil:
			return false, err
		case !p.direct:
			p.size += n
		case escaped:
			p.pos = start
			p.out = p.emitString(p.out)
		default:
			p.out = append(p.out, p.src[start:p.pos]...)
		}
	case 't':
		err = p.literal("true")
	case 'f':
		err = p.literal("false")
	case 'n':
		err = p.literal("null")
	default:
		if c != '-' && !isDigit(c) {
			return false, p.failChar(p.pos, "looking for beginning of value")
		}
		err = p.number()
	}
	return false, err
}

func (p *parser) literal(lit string) error {
	start := p.pos
	for i := 0; i < len(lit); i++ {
		if start+i >= len(p.src) || p.src[start+i] != lit[i] {
			return p.failChar(start+i, "in literal "+lit)
		}
	}
	p.pos += len(lit)
	if p.direct {
		p.out = append(p.out, lit...)
	} else {
		p.size += len(lit)
	}
	return nil
}

// member reads an object member's name and the colon after it.
func (p *parser) member() error {
	p.skipWS()
	if p.pos >= len(p.src) || p.src[p.pos] != '"' {
		return p.failChar(p.pos, "looking for object member name")
	}
	off := p.pos
	n, escaped, err := p.str()
	if err != nil {
		return err
	}
	p.skipWS()
	if p.pos >= len(p.src) || p.src[p.pos] != ':' {
		return p.failChar(p.pos, "after object member name")
	}
	p.pos++
	f := &p.stack[len(p.stack)-1]
	if f.sorted && len(p.members) > int(f.base) {
		// Names mostly differ in their first byte: decide from it when
		// neither is a quote or a backslash.
		prev := int(p.members[len(p.members)-1])
		a, b := p.src[prev+1], p.src[off+1]
		if a != b && a != '"' && b != '"' && a != '\\' && b != '\\' {
			f.sorted = a < b
		} else {
			f.sorted = p.cmpNames(prev, off) < 0
		}
	}
	p.members = append(grow(p.members, 1), uint32(off))
	omit, descend := false, false
	if f.live {
		omit, descend = p.matchOmit(p.decodedName(off, n, escaped))
	}
	f.descend = descend && !omit
	if omit {
		f.omitCur = true
		f.nOmit++
		if p.direct {
			p.outs = append(grow(p.outs, 1), omittedOut)
			p.omitSize = len(p.out)
		} else {
			p.omitSize = p.size
		}
		return nil
	}
	if !p.direct {
		if f.written {
			p.size++ // comma
		}
		f.written = true
		p.size += n + 1 // name and colon
		return nil
	}
	if 16*len(p.outs) > len(p.src)+4096 {
		// One object with very many small members, whose 12 bytes each
		// (in members, outs and perm) cost more than its text: see run.
		return errLong
	}
	if f.written {
		p.out = append(p.out, ',')
	}
	f.written = true
	p.outs = append(grow(p.outs, 1), uint32(len(p.out)))
	if escaped {
		end := p.pos
		p.pos = off
		p.out = p.emitString(p.out)
		p.pos = end
	} else {
		p.out = append(p.out, p.src[off:off+n]...)
	}
	p.out = append(p.out, ':')
	return nil
}

// grow makes room for n more elements in s. Every buffer of the parser that
// grows with the input grows here.
func grow[T any](s []T, n int) []T {
	if cap(s)-len(s) >= n {
		return s
	}
	s2 := append(s, make([]T, n)...)[:len(s)]
	if testHook != nil {
		testHook(cap(s2) * int(unsafe.Sizeof(s2[0])))
		runtime.KeepAlive(s) // the old buffer counts until the copy is done
	}
	return s2
}

// testHook, set only by tests, is called with its size after each
// allocation of working memory. TestMemory uses it to measure the peak live
// heap.
var testHook func(size int)
