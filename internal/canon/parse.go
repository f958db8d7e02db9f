package canon

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
)

// The parser works in two phases. parse reads src once, without recursion,
// and records the document as a tape of nodes in source order, a container's
// descendants right after it. Scalars are canonicalised as they are read:
// their canonical text is either a span of src (when the source text is
// already canonical, the common case) or a span of p.buf. When an object
// closes, its members are sorted and checked for duplicates, and the sorted
// order is kept in p.order. emit then walks the tape, again without
// recursion, writing objects in sorted order. Every node knows the size of
// its canonical text, so the output is allocated once at its exact size.

type nodeKind uint8

const (
	kindScalar nodeKind = iota
	kindArray
	kindObject
)

type node struct {
	kind  nodeKind
	inSrc bool // scalar: start and end index src rather than buf
	// start and end give a scalar's canonical text, and an object's span of
	// order: the node indexes of its member names, sorted and without the
	// omitted members. Each name's node is followed by its value's.
	start, end int
	next       int // index of the first node after this node's subtree
	size       int // length of the value's canonical text
}

// member is an object member seen while the object is open.
type member struct {
	name    []byte // decoded name
	keyNode int    // index of the name's node; the value's follows it
	off     int    // offset of the name in src
	omit    bool   // leave out of the canonical form
}

// frame is an open array or object.
type frame struct {
	node     int  // index of the container's node
	object   bool // an object rather than an array
	base     int  // object: index in members of its first member
	nameBase int  // object: len(names) when it opened
	size     int  // array: total size of the elements so far
	count    int  // array: number of elements so far
	live     bool // object: Omit entries may match its members
	descend  bool // object: Omit entries may match inside the current member's value
	name     []byte
}

type emitFrame struct {
	node int // index of the container's node
	cur  int // array: next element's node; object: next index in order
}

type parser struct {
	src      []byte
	pos      int
	maxDepth int
	omit     []string
	last     int // index of the node of the value completed last

	nodes     []node
	order     []int
	members   []member
	stack     []frame
	names     []byte // decoded names that had escapes, for open objects
	buf       []byte // canonical text of scalars that differs from src
	dec       []byte // scratch: the decoded string value being read
	emitStack []emitFrame
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
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
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

func (p *parser) addScalar(inSrc bool, start, end int) {
	i := len(p.nodes)
	p.nodes = append(p.nodes, node{
		kind: kindScalar, inSrc: inSrc, start: start, end: end,
		next: i + 1, size: end - start,
	})
	p.last = i
}

// parse reads the whole of src into the tape.
func (p *parser) parse() error {
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
				return nil
			}
			f := &p.stack[len(p.stack)-1]
			if !f.object {
				f.size += p.nodes[p.last].size
				f.count++
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
		kind, end := kindArray, byte(']')
		live := false
		if object {
			kind, end = kindObject, '}'
			if len(p.stack) == 0 {
				live = len(p.omit) > 0
			} else {
				parent := &p.stack[len(p.stack)-1]
				live = parent.object && parent.descend
			}
		}
		p.stack = append(p.stack, frame{
			node: len(p.nodes), object: object,
			base: len(p.members), nameBase: len(p.names), live: live,
		})
		p.nodes = append(p.nodes, node{kind: kind})
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
		_, err = p.str(false)
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
	p.addScalar(true, start, p.pos)
	return nil
}

// member reads an object member's name and the colon after it.
func (p *parser) member() error {
	p.skipWS()
	if p.pos >= len(p.src) || p.src[p.pos] != '"' {
		return p.failChar(p.pos, "looking for object member name")
	}
	off := p.pos
	name, err := p.str(true)
	if err != nil {
		return err
	}
	p.skipWS()
	if p.pos >= len(p.src) || p.src[p.pos] != ':' {
		return p.failChar(p.pos, "after object member name")
	}
	p.pos++
	f := &p.stack[len(p.stack)-1]
	omit, descend := false, false
	if f.live {
		omit, descend = p.matchOmit(name)
	}
	f.name = name
	f.descend = descend && !omit
	p.members = append(p.members, member{name: name, keyNode: len(p.nodes) - 1, off: off, omit: omit})
	return nil
}

// matchOmit reports whether the path to the member name of the innermost
// open object equals an Omit entry (omit) or is a proper prefix of one
// (descend). It is called only for objects whose ancestors are all objects.
func (p *parser) matchOmit(name []byte) (omit, descend bool) {
	top := len(p.stack) - 1
	for _, rest := range p.omit {
		for i := 0; ; i++ {
			comp := name
			if i < top {
				comp = p.stack[i].name
			}
			head, tail, more := strings.Cut(rest, ".")
			if head != string(comp) {
				break
			}
			if i == top {
				if more {
					descend = true
				} else {
					omit = true
				}
				break
			}
			if !more {
				break // the entry is shorter than the path
			}
			rest = tail
		}
	}
	return omit, descend
}

// close closes the innermost open container.
func (p *parser) close() error {
	f := &p.stack[len(p.stack)-1]
	n := &p.nodes[f.node]
	n.next = len(p.nodes)
	if f.object {
		ms := p.members[f.base:]
		if err := p.sortMembers(ms); err != nil {
			return err
		}
		n.start = len(p.order)
		size, count := 2, 0
		for _, m := range ms {
			if m.omit {
				continue
			}
			if count > 0 {
				size++ // comma
			}
			size += p.nodes[m.keyNode].size + 1 + p.nodes[m.keyNode+1].size
			p.order = append(p.order, m.keyNode)
			count++
		}
		n.end = len(p.order)
		n.size = size
		clear(ms) // drop references into src
		p.members = p.members[:f.base]
		p.names = p.names[:f.nameBase]
	} else {
		n.size = 2 + f.size
		if f.count > 1 {
			n.size += f.count - 1
		}
	}
	p.last = f.node
	*f = frame{}
	p.stack = p.stack[:len(p.stack)-1]
	return nil
}

// sortMembers sorts the members of one object by name and fails if two
// have the same name.
func (p *parser) sortMembers(ms []member) error {
	sorted := true
	for i := 1; i < len(ms); i++ {
		if bytes.Compare(ms[i-1].name, ms[i].name) >= 0 {
			sorted = false
			break
		}
	}
	if sorted {
		return nil
	}
	slices.SortFunc(ms, func(a, b member) int { return bytes.Compare(a.name, b.name) })
	for i := 1; i < len(ms); i++ {
		if bytes.Equal(ms[i-1].name, ms[i].name) {
			return p.fail(ErrDuplicateKey, max(ms[i-1].off, ms[i].off), "duplicate object member name")
		}
	}
	return nil
}

// emit appends the canonical text of the tape to dst.
func (p *parser) emit(dst []byte) []byte {
	dst = p.emitValue(dst, 0)
	for len(p.emitStack) > 0 {
		f := &p.emitStack[len(p.emitStack)-1]
		n := &p.nodes[f.node]
		if n.kind == kindArray {
			if f.cur >= n.next {
				dst = append(dst, ']')
				p.emitStack = p.emitStack[:len(p.emitStack)-1]
				continue
			}
			if f.cur != f.node+1 {
				dst = append(dst, ',')
			}
			c := f.cur
			f.cur = p.nodes[c].next
			dst = p.emitValue(dst, c)
			continue
		}
		if f.cur >= n.end {
			dst = append(dst, '}')
			p.emitStack = p.emitStack[:len(p.emitStack)-1]
			continue
		}
		if f.cur != n.start {
			dst = append(dst, ',')
		}
		k := p.order[f.cur]
		f.cur++
		dst = p.emitValue(dst, k)
		dst = append(dst, ':')
		dst = p.emitValue(dst, k+1)
	}
	return dst
}

// emitValue appends a scalar, or the opening bracket of a container, which
// it then pushes on the emit stack.
func (p *parser) emitValue(dst []byte, i int) []byte {
	n := &p.nodes[i]
	switch n.kind {
	case kindArray:
		p.emitStack = append(p.emitStack, emitFrame{node: i, cur: i + 1})
		return append(dst, '[')
	case kindObject:
		p.emitStack = append(p.emitStack, emitFrame{node: i, cur: n.start})
		return append(dst, '{')
	}
	if n.inSrc {
		return append(dst, p.src[n.start:n.end]...)
	}
	return append(dst, p.buf[n.start:n.end]...)
}
