package faultproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

const (
	// maxFrame bounds one command or reply, in bytes: the proxy holds each
	// whole before it forwards it.
	maxFrame = 64 << 20
	// maxElements bounds the elements of one aggregate, and maxDepth the
	// nesting of aggregates in a reply.
	maxElements = 1 << 20
	maxDepth    = 64
)

var errProtocol = errors.New("faultproxy: RESP protocol error")

// frameReader reads whole RESP frames from r, keeping their raw bytes in buf
// so they can be forwarded unchanged.
type frameReader struct {
	r   *bufio.Reader
	buf []byte
}

// line reads one CRLF-terminated line into buf and returns it without the
// CRLF.
func (f *frameReader) line() ([]byte, error) {
	start := len(f.buf)
	for {
		part, err := f.r.ReadSlice('\n')
		f.buf = append(f.buf, part...)
		if len(f.buf) > maxFrame {
			return nil, fmt.Errorf("%w: frame over %d bytes", errProtocol, maxFrame)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
	l := f.buf[start:]
	if len(l) < 2 || l[len(l)-2] != '\r' {
		return nil, fmt.Errorf("%w: line not terminated by CRLF", errProtocol)
	}
	return l[:len(l)-2], nil
}

// length parses the length or count after a type byte.
func length(l []byte) (int, error) {
	n, err := strconv.Atoi(string(l[1:]))
	if err != nil || n < -1 {
		return 0, fmt.Errorf("%w: bad length %q", errProtocol, l)
	}
	return n, nil
}

// payload reads n bytes and a CRLF into buf and returns the n bytes.
func (f *frameReader) payload(n int) ([]byte, error) {
	if len(f.buf)+n+2 > maxFrame {
		return nil, fmt.Errorf("%w: frame over %d bytes", errProtocol, maxFrame)
	}
	start := len(f.buf)
	f.buf = append(f.buf, make([]byte, n+2)...)
	if _, err := io.ReadFull(f.r, f.buf[start:]); err != nil {
		return nil, err
	}
	if f.buf[len(f.buf)-2] != '\r' || f.buf[len(f.buf)-1] != '\n' {
		return nil, fmt.Errorf("%w: bulk string not terminated by CRLF", errProtocol)
	}
	return f.buf[start : start+n], nil
}

// command reads one client command, a RESP array of bulk strings or an
// inline command, and returns its arguments; the raw bytes are in buf.
// Empty inline lines are skipped, as Redis does.
func (f *frameReader) command() ([]string, error) {
	for {
		f.buf = f.buf[:0]
		l, err := f.line()
		if err != nil {
			return nil, err
		}
		if len(l) == 0 || l[0] != '*' {
			if args := strings.Fields(string(l)); len(args) > 0 {
				return args, nil
			}
			continue
		}
		n, err := length(l)
		if err != nil {
			return nil, err
		}
		if n > maxElements {
			return nil, fmt.Errorf("%w: %d arguments", errProtocol, n)
		}
		if n <= 0 {
			continue // Redis ignores an empty or null array
		}
		args := make([]string, n)
		for i := range args {
			l, err := f.line()
			if err != nil {
				return nil, err
			}
			if len(l) == 0 || l[0] != '$' {
				return nil, fmt.Errorf("%w: argument is not a bulk string: %q", errProtocol, l)
			}
			size, err := length(l)
			if err != nil || size < 0 {
				return nil, fmt.Errorf("%w: bad bulk length %q", errProtocol, l)
			}
			b, err := f.payload(size)
			if err != nil {
				return nil, err
			}
			args[i] = string(b)
		}
		return args, nil
	}
}

// reply reads one server frame, RESP2 or RESP3, into buf. push reports an
// out-of-band push frame, which answers no command.
func (f *frameReader) reply() (push bool, err error) {
	f.buf = f.buf[:0]
	if b, err := f.r.Peek(1); err == nil && b[0] == '>' {
		push = true
	}
	return push, f.value(0)
}

func (f *frameReader) value(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: replies nested over %d deep", errProtocol, maxDepth)
	}
	l, err := f.line()
	if err != nil {
		return err
	}
	if len(l) == 0 {
		return fmt.Errorf("%w: empty line", errProtocol)
	}
	switch l[0] {
	case '+', '-', ':', ',', '#', '_', '(':
		return nil
	case '$', '!', '=':
		n, err := length(l)
		if err != nil || n < 0 {
			return err // -1: a RESP2 null
		}
		_, err = f.payload(n)
		return err
	case '*', '~', '>', '%', '|':
		n, err := length(l)
		if err != nil || n < 0 {
			return err
		}
		if n > maxElements {
			return fmt.Errorf("%w: %d elements", errProtocol, n)
		}
		if l[0] == '%' || l[0] == '|' {
			n *= 2
		}
		for range n {
			if err := f.value(depth + 1); err != nil {
				return err
			}
		}
		if l[0] == '|' {
			return f.value(depth + 1) // an attribute precedes the value it describes
		}
		return nil
	}
	return fmt.Errorf("%w: unknown type %q", errProtocol, l[0])
}
