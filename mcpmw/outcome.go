package mcpmw

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkey/idemkey/redisstore"
)

// A stored outcome is redisstore.Response{Code: codeResult or
// codeToolError, Body: 0x01 and then the CallToolResult as JSON, as the
// tool returned it}: content, structured content, isError and the tool's
// own _meta. The code says at a glance (idemkey inspect) whether the tool
// reported an error.
const (
	outcomeVersion = 1
	codeResult     = 200
	codeToolError  = 422
)

// errUnreadable marks a stored outcome that cannot be decoded.
var errUnreadable = errors.New("mcpmw: stored outcome unreadable")

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

// decodeOutcome returns the stored result, marked replayed; its errors
// match errUnreadable.
func decodeOutcome(r redisstore.Response) (*mcp.CallToolResult, error) {
	if len(r.Body) == 0 || r.Body[0] != outcomeVersion || (r.Code != codeResult && r.Code != codeToolError) {
		return nil, fmt.Errorf("%w: not an MCP tool result of a known version (code %d)", errUnreadable, r.Code)
	}
	res := new(mcp.CallToolResult)
	if err := json.Unmarshal(r.Body[1:], res); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	if res.IsError != (r.Code == codeToolError) {
		return nil, fmt.Errorf("%w: isError %v under code %d", errUnreadable, res.IsError, r.Code)
	}
	if res.Content == nil {
		res.Content = []mcp.Content{} // as the SDK sends a result without content
	}
	meta := maps.Clone(res.Meta)
	if meta == nil {
		meta = mcp.Meta{}
	}
	meta[MetaReplayed] = true
	res.Meta = meta
	return res, nil
}
