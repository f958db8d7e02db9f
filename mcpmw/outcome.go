package mcpmw

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkey/idemkey/redisstore"
)

// A stored outcome is redisstore.Response{Code: codeResult or
// codeToolError, Body: 0x01 and then the CallToolResult's JSON, the bytes
// the tool's result encoded to}: content, structured content, isError and
// the tool's own _meta. A replay sends those bytes again, only adding to
// their _meta, so that nothing the SDK's types do not know (a member, the
// order of an object's members, a number's digits) is lost. The code says
// at a glance (idemkey inspect) whether the tool reported an error.
//
// A result over Options.MaxResultBytes is not stored: its record holds
// Response{Code: codeTooLarge, Body: 0x01 and tooLarge's JSON}, which
// replays as the RESULT_TOO_LARGE tool error.
const (
	outcomeVersion = 1
	codeResult     = 200
	codeToolError  = 422
	codeTooLarge   = 413
)

// errUnreadable marks a stored outcome that cannot be decoded.
var errUnreadable = errors.New("mcpmw: stored outcome unreadable")

// tooLarge is the body of the record of a result that was too large to
// store.
type tooLarge struct {
	Bytes int  `json:"bytes"`
	Limit int  `json:"limit"`
	Error bool `json:"isError,omitempty"`
}

// encodeOutcome returns res as the store keeps it.
func encodeOutcome(res *mcp.CallToolResult) (redisstore.Response, error) {
	b, err := json.Marshal(res)
	if err != nil {
		return redisstore.Response{}, fmt.Errorf("mcpmw: encode the tool's result: %w", err)
	}
	code := codeResult
	if res.IsError {
		code = codeToolError
	}
	return redisstore.Response{Code: code, Body: append([]byte{outcomeVersion}, b...)}, nil
}

// encodeTooLarge returns the record of a result of size bytes, over limit,
// that is not stored.
func encodeTooLarge(size, limit int, isError bool) redisstore.Response {
	b, _ := json.Marshal(tooLarge{Bytes: size, Limit: limit, Error: isError})
	return redisstore.Response{Code: codeTooLarge, Body: append([]byte{outcomeVersion}, b...)}
}

// replayResult is a replayed tool result: the stored bytes, sent as they
// were stored but for the members added to their _meta (the replay mark,
// and what the SDK adds to every result). The embedded CallToolResult is
// those bytes decoded, for the SDK (which sets _meta and the result type
// through it) and for Go code reading the result.
type replayResult struct {
	*mcp.CallToolResult
	raw []byte // the stored JSON object
}

// MarshalJSON writes the stored bytes: their members in their order, the
// values byte for byte, _meta with the members set since (the replay mark,
// the SDK's) added, and any member the SDK set that they lack (the result
// type).
func (r *replayResult) MarshalJSON() ([]byte, error) {
	cur, err := r.CallToolResult.MarshalJSON()
	if err != nil {
		return nil, err
	}
	now, err := members(cur)
	if err != nil {
		return nil, err
	}
	was, err := members(r.raw)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out bytes.Buffer
	out.WriteByte('{')
	write := func(name string, value []byte) { writeMember(&out, name, value) }
	for _, m := range was {
		seen[m.name] = true
		switch {
		case m.name == "_meta":
			meta, err := mergeMeta(m.value, find(now, "_meta"))
			if err != nil {
				return nil, err
			}
			write(m.name, meta)
		case m.name == "content" && bytes.Equal(m.value, []byte("null")):
			write(m.name, []byte("[]")) // as the SDK sends a result without content
		default:
			write(m.name, m.value)
		}
	}
	for _, m := range now {
		if !seen[m.name] {
			write(m.name, m.value)
		}
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

// mergeMeta returns the stored _meta object was with the members of now
// that it lacks, and the replay mark, appended.
func mergeMeta(was, now []byte) ([]byte, error) {
	old, err := members(was)
	if err != nil {
		return nil, err
	}
	cur, err := members(now)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out bytes.Buffer
	out.WriteByte('{')
	write := func(name string, value []byte) { writeMember(&out, name, value) }
	for _, m := range old {
		if m.name == MetaReplayed {
			continue
		}
		seen[m.name] = true
		write(m.name, m.value)
	}
	for _, m := range cur {
		if !seen[m.name] {
			write(m.name, m.value)
		}
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

// writeMember appends a member to the object being written in out.
func writeMember(out *bytes.Buffer, name string, value []byte) {
	if out.Len() > 1 {
		out.WriteByte(',')
	}
	n, _ := json.Marshal(name)
	out.Write(n)
	out.WriteByte(':')
	out.Write(value)
}

// member is one member of a JSON object, its value's bytes as they were.
type member struct {
	name  string
	value json.RawMessage
}

// members returns the members of the JSON object b in their order (none
// for an empty b or null).
func members(b []byte) ([]member, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || bytes.Equal(b, []byte("null")) {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("%w: not a JSON object", errUnreadable)
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errUnreadable, err)
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%w: %w", errUnreadable, err)
		}
		out = append(out, member{name, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	return out, nil
}

// find returns the value of the member named name, or nil.
func find(ms []member, name string) []byte {
	for _, m := range ms {
		if m.name == name {
			return m.value
		}
	}
	return nil
}

// decodeOutcome returns the stored result, marked replayed; its errors
// match errUnreadable.
func decodeOutcome(r redisstore.Response) (*replayResult, error) {
	if len(r.Body) == 0 || r.Body[0] != outcomeVersion || (r.Code != codeResult && r.Code != codeToolError && r.Code != codeTooLarge) {
		return nil, fmt.Errorf("%w: not an MCP tool result of a known version (code %d)", errUnreadable, r.Code)
	}
	raw := r.Body[1:]
	if r.Code == codeTooLarge {
		var tl tooLarge
		if err := json.Unmarshal(raw, &tl); err != nil {
			return nil, fmt.Errorf("%w: %w", errUnreadable, err)
		}
		res := &mcp.CallToolResult{
			Meta: mcp.Meta{MetaReason: ReasonResultTooLarge},
			Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("idemkey: the call with this idempotency key ran, but its result (%d bytes) "+
				"was over the server's limit for a stored result (%d bytes), so it cannot be sent again; the call will not run again with this key", tl.Bytes, tl.Limit)}},
			IsError: true,
		}
		raw, _ := json.Marshal(res)
		return marked(res, raw), nil
	}
	res := new(mcp.CallToolResult)
	if err := json.Unmarshal(raw, res); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	if res.IsError != (r.Code == codeToolError) {
		return nil, fmt.Errorf("%w: isError %v under code %d", errUnreadable, res.IsError, r.Code)
	}
	if res.Content == nil {
		res.Content = []mcp.Content{} // as the SDK sends a result without content
	}
	if _, err := members(raw); err != nil {
		return nil, err
	}
	return marked(res, raw), nil
}

// marked returns res, stored as raw, marked replayed.
func marked(res *mcp.CallToolResult, raw []byte) *replayResult {
	meta := maps.Clone(res.Meta)
	if meta == nil {
		meta = mcp.Meta{}
	}
	meta[MetaReplayed] = true
	res.Meta = meta
	return &replayResult{CallToolResult: res, raw: raw}
}
