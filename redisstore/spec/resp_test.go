package spec

import (
	"bytes"
	"fmt"
	"strconv"
)

// The replies of the golden vectors are in RESP2, the bytes Redis sends a
// client that did not ask for RESP3 (whose integers, bulk strings and
// arrays, all that the scripts reply, are the same). go-redis hands them
// over as int64, string and []any.

// parseRESP parses one RESP2 integer, bulk string or array (of those),
// which must be all of b.
func parseRESP(b []byte) (any, error) {
	v, rest, err := parseOne(b, 0)
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("%d bytes after the reply", len(rest))
	}
	return v, err
}

func parseOne(b []byte, depth int) (any, []byte, error) {
	i := bytes.Index(b, []byte("\r\n"))
	if len(b) == 0 || i < 1 || depth > 4 {
		return nil, nil, fmt.Errorf("not a reply: %q", b)
	}
	n, err := strconv.ParseInt(string(b[1:i]), 10, 64)
	if err != nil {
		return nil, nil, err
	}
	rest := b[i+2:]
	switch b[0] {
	case ':':
		return n, rest, nil
	case '$':
		if n < 0 || int64(len(rest)) < n+2 || string(rest[n:n+2]) != "\r\n" {
			return nil, nil, fmt.Errorf("bad bulk string")
		}
		return string(rest[:n]), rest[n+2:], nil
	case '*':
		if n < 0 || n > 16 {
			return nil, nil, fmt.Errorf("bad array length %d", n)
		}
		out := make([]any, n)
		for k := range out {
			if out[k], rest, err = parseOne(rest, depth+1); err != nil {
				return nil, nil, err
			}
		}
		return out, rest, nil
	}
	return nil, nil, fmt.Errorf("no RESP type %q", b[0])
}
