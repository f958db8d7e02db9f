package canon

import (
	"cmp"
	"encoding/binary"
	"math/bits"
	"slices"
	"strings"
)

// An object's members, as pass 1 reads them: their names decoded for
// Options.Omit, put in order when the object closes (directly, or as a
// block for pass 2), and the omitted ones recorded.

// omittedOut stands in p.outs for a member that is not written.
const omittedOut = ^uint32(0)

// decodedName returns the name at off, n bytes long in its canonical form,
// of the innermost open object, which must be live, and keeps it in p.path
// for the objects inside its value.
func (p *parser) decodedName(off, n int, escaped bool) []byte {
	depth := len(p.stack) - 1
	if len(p.path) <= depth {
		p.path = append(p.path, make([][]byte, depth+1-len(p.path))...)
	}
	var name []byte
	if escaped {
		for len(p.pathBuf) <= depth {
			p.pathBuf = append(p.pathBuf, nil)
		}
		r := nameReader{s: p.src, i: off + 1}
		b := p.pathBuf[depth][:0]
		for {
			c, ok := r.next()
			if !ok {
				break
			}
			b = append(b, c)
		}
		p.pathBuf[depth] = b
		name = b
	} else {
		name = p.src[off+1 : off+n-1] // without escapes, canonical text is source text
	}
	p.path[depth] = name
	return name
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
				comp = p.path[i]
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
	if f.object {
		ms := p.members[f.base:]
		if !f.sorted {
			if p.direct {
				outs := p.outs[f.base:]
				perm := grow(p.perm[:0], len(ms))[:len(ms)]
				for i := range perm {
					perm[i] = uint32(i)
				}
				p.perm = perm
				if err := p.sortMembers(perm, ms); err != nil {
					return err
				}
				p.reorder(f, perm, outs)
			} else {
				if err := p.sortMembers(ms, nil); err != nil {
					return err
				}
				if !f.muted {
					p.addBlock(f, ms)
				}
			}
		}
		p.members = p.members[:f.base]
		if p.direct {
			p.outs = p.outs[:f.base]
		}
	}
	if p.direct {
		p.out = append(p.out, p.src[p.pos-1])
	} else {
		p.size++
	}
	p.stack = p.stack[:len(p.stack)-1]
	return nil
}

// reorder rewrites the text of the members of the object f, which is
// closing, in the order perm gives. outs are where their text starts.
func (p *parser) reorder(f *frame, perm, outs []uint32) {
	out := p.out
	end := func(k uint32) int { // where the text of member k ends
		for _, o := range outs[k+1:] {
			if o != omittedOut {
				return int(o) - 1 // before the comma
			}
		}
		return len(out)
	}
	tmp := grow(p.tmp[:0], len(out)-int(f.outOpen)-1)
	for _, k := range perm {
		if outs[k] == omittedOut {
			continue
		}
		if len(tmp) > 0 {
			tmp = append(tmp, ',')
		}
		tmp = append(tmp, out[outs[k]:end(k)]...)
	}
	copy(out[f.outOpen+1:], tmp)
	p.tmp = tmp
}

// sortMembers sorts keys, which stand for members of one object, by name
// and fails if two have the same name. A key is the offset of a member's
// name, or with names its index there.
func (p *parser) sortMembers(keys, names []uint32) error {
	name := func(k uint32) int {
		if names != nil {
			return int(names[k])
		}
		return int(k)
	}
	if len(keys) <= 12 {
		// Insertion sort, which compares every two members that end up
		// next to each other, so it sees any duplicate.
		dup := false
		for i := 1; i < len(keys); i++ {
			for j := i; j > 0; j-- {
				a, b := name(keys[j-1]), name(keys[j])
				c := p.cmpNames(a, b)
				if c == 0 {
					dup = true
					c = cmp.Compare(a, b)
				}
				if c < 0 {
					break
				}
				keys[j-1], keys[j] = keys[j], keys[j-1]
			}
		}
		if !dup {
			return nil
		}
	} else {
		slices.SortFunc(keys, func(a, b uint32) int {
			x, y := name(a), name(b)
			if c := p.cmpNames(x, y); c != 0 {
				return c
			}
			return cmp.Compare(x, y) // the earlier of two equal names first
		})
	}
	for i := 1; i < len(keys); i++ {
		if a, b := name(keys[i-1]), name(keys[i]); p.cmpNames(a, b) == 0 {
			return p.fail(ErrDuplicateKey, b, "duplicate object member name")
		}
	}
	return nil
}

// addBlock records the sorted members of the object f, which has just
// closed, leaving out the omitted ones.
func (p *parser) addBlock(f *frame, ms []uint32) {
	closeOff := uint64(uint32(p.pos-1) - f.open)
	n := uint64(len(ms) - int(f.nOmit))
	need := uvarintLen(closeOff) + uvarintLen(n)
	for _, m := range ms {
		need += uvarintLen(uint64(m - f.open)) // an omitted one too: only a few bytes more
	}
	b := grow(p.blocks, need)
	p.index = append(grow(p.index, 1), entry{open: f.open, block: uint32(len(b))})
	b = binary.AppendUvarint(b, closeOff)
	b = binary.AppendUvarint(b, n)
	for _, m := range ms {
		if f.nOmit > 0 && p.isOmitted(m) {
			continue
		}
		b = binary.AppendUvarint(b, uint64(m-f.open))
	}
	p.blocks = b
}

// uvarintLen returns the length of x as a uvarint.
func uvarintLen(x uint64) int {
	return (bits.Len64(x|1) + 6) / 7
}

// omittedAt reports whether the member whose name is at off is omitted, and
// if so where its value ends.
func (p *parser) omittedAt(off uint32) (end uint32, ok bool) {
	o := p.omitted
	if len(o) == 0 || off < o[0].off || off > o[len(o)-1].off {
		return 0, false
	}
	i, found := slices.BinarySearchFunc(o, off, func(s span, off uint32) int { return cmp.Compare(s.off, off) })
	if !found {
		return 0, false
	}
	return o[i].end, true
}

func (p *parser) isOmitted(off uint32) bool {
	_, ok := p.omittedAt(off)
	return ok
}
