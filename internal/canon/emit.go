package canon

import (
	"encoding/binary"
	"io"
)

// chunkSize is how much WriteJSON gathers before it writes.
const chunkSize = 8 << 10

// eframe is an array or object open in pass 2.
type eframe struct {
	open    uint32 // offset of the opening bracket
	close   uint32 // ordered object: offset of its '}'
	next    uint32 // ordered object: offset in blocks of the next member
	left    uint32 // ordered object: members still to write
	object  bool
	ordered bool // written in the order of a block, not as in src
	written bool // something has been written (the next needs a comma)
}

// emit is pass 2: it appends the canonical text of the document, which
// parse found valid, to dst. With a writer (WriteJSON) it writes dst out
// whenever it holds chunkSize bytes, and at the end.
func (p *parser) emit(dst []byte, w io.Writer) ([]byte, error) {
	p.w = w
	p.pos = 0
	p.skipWS()
	dst = p.emitValue(dst)
	for len(p.estack) > 0 {
		if w != nil && len(dst) >= chunkSize {
			if dst = p.flush(dst); p.err != nil {
				return dst, p.err
			}
		}
		f := &p.estack[len(p.estack)-1]
		if f.ordered {
			if f.left == 0 {
				dst = append(dst, '}')
				p.pos = int(f.close) + 1
				p.estack = p.estack[:len(p.estack)-1]
				continue
			}
			d, n := binary.Uvarint(p.blocks[f.next:])
			f.next += uint32(n)
			f.left--
			p.pos = int(f.open) + int(d)
			if f.written {
				dst = append(dst, ',')
			}
			f.written = true
			dst = p.emitMember(dst)
			continue
		}
		p.skipWS()
		c := p.src[p.pos]
		if c == ']' || c == '}' {
			dst = append(dst, c)
			p.pos++
			p.estack = p.estack[:len(p.estack)-1]
			continue
		}
		if c == ',' {
			p.pos++
			p.skipWS()
		}
		if f.object {
			if end, ok := p.omittedAt(uint32(p.pos)); ok {
				p.pos = int(end)
				continue
			}
		}
		if f.written {
			dst = append(dst, ',')
		}
		f.written = true
		if f.object {
			dst = p.emitMember(dst)
		} else {
			dst = p.emitValue(dst)
		}
	}
	if w != nil {
		dst = p.flush(dst)
	}
	return dst, p.err
}

// emitMember appends the member at p.pos: its name, a colon and its value
// (of which only the opening bracket, for an array or object).
func (p *parser) emitMember(dst []byte) []byte {
	dst = p.emitString(dst)
	p.skipWS()
	p.pos++ // the colon
	p.skipWS()
	return p.emitValue(append(dst, ':'))
}

// emitValue appends a scalar, or the opening bracket of a container, which
// it then pushes on the stack.
func (p *parser) emitValue(dst []byte) []byte {
	s := p.src
	switch c := s[p.pos]; c {
	case '[':
		p.estack = append(grow(p.estack, 1), eframe{open: uint32(p.pos)})
		p.pos++
		return append(dst, '[')
	case '{':
		f := eframe{open: uint32(p.pos), object: true}
		if i, ok := p.block(f.open); ok {
			b := p.blocks[i:]
			d, n1 := binary.Uvarint(b)
			left, n2 := binary.Uvarint(b[n1:])
			f.ordered = true
			f.close = f.open + uint32(d)
			f.left = uint32(left)
			f.next = uint32(i + n1 + n2)
		}
		p.estack = append(grow(p.estack, 1), f)
		p.pos++
		return append(dst, '{')
	case '"':
		return p.emitString(dst)
	case 't':
		p.pos += 4
		return append(dst, "true"...)
	case 'f':
		p.pos += 5
		return append(dst, "false"...)
	case 'n':
		p.pos += 4
		return append(dst, "null"...)
	}
	n, _, _ := scanNumber(s, p.pos)
	start := p.pos
	p.pos = n.end
	if n.plain(s) {
		return append(dst, s[start:n.end]...)
	}
	return n.appendTo(dst, s)
}

// block returns the offset in blocks of the block of the object whose '{'
// is at open, if it has one.
func (p *parser) block(open uint32) (int, bool) {
	x := p.index
	lo, hi := 0, len(x)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if x[m].open < open {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(x) && x[lo].open == open {
		return int(x[lo].block), true
	}
	return 0, false
}

// appendRaw appends b, which WriteJSON writes out directly when it is
// large, rather than copying it.
func (p *parser) appendRaw(dst, b []byte) []byte {
	if p.w == nil || len(b) < chunkSize {
		return append(dst, b...)
	}
	dst = p.flush(dst)
	p.write(b)
	return dst
}

// flush writes dst out and returns it emptied.
func (p *parser) flush(dst []byte) []byte {
	p.write(dst)
	return dst[:0]
}

func (p *parser) write(b []byte) {
	if p.err != nil || len(b) == 0 {
		return
	}
	n, err := p.w.Write(b)
	p.written += int64(n)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	p.err = err
}
