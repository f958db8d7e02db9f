package mcpmw

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/redisstore"
)

// A stored result decodes to what the tool returned, marked replayed; the
// tool's own _meta is kept.
func TestOutcomeRoundTrip(t *testing.T) {
	for _, res := range []*mcp.CallToolResult{
		{Content: []mcp.Content{&mcp.TextContent{Text: "sent"}}, StructuredContent: map[string]any{"id": "msg_1", "n": 1.5}},
		{Content: []mcp.Content{&mcp.TextContent{Text: "no such mailbox"}}, IsError: true, Meta: mcp.Meta{"trace": "t1"}},
		{Content: []mcp.Content{}},
	} {
		stored, err := encodeOutcome(res)
		require.NoError(t, err)
		got, err := decodeOutcome(stored)
		require.NoError(t, err)
		require.Equal(t, true, got.Meta[MetaReplayed])
		require.Equal(t, res.IsError, got.IsError)
		want, _ := json.Marshal(res.Content)
		have, _ := json.Marshal(got.Content)
		require.JSONEq(t, string(want), string(have))
		if res.StructuredContent != nil {
			require.Equal(t, res.StructuredContent, got.StructuredContent)
		}
		for k, v := range res.Meta {
			require.Equal(t, v, got.Meta[k])
		}
		require.NotContains(t, res.Meta, MetaReplayed, "the tool's result is not changed")
	}
}

// Hostile or corrupt stored bytes never panic the decoder: they decode to a
// result that encodes again to what decodes the same, or to an error
// matching errUnreadable.
func FuzzDecodeOutcome(f *testing.F) {
	for _, res := range []*mcp.CallToolResult{
		{Content: []mcp.Content{&mcp.TextContent{Text: "sent"}}, StructuredContent: map[string]any{"id": "msg_1"}},
		{Content: []mcp.Content{&mcp.ImageContent{Data: []byte{1, 2}, MIMEType: "image/png"}}, IsError: true},
	} {
		stored, err := encodeOutcome(res)
		require.NoError(f, err)
		f.Add(stored.Code, stored.Body)
	}
	f.Add(200, []byte{1, '{', '}'})
	f.Add(422, []byte{1, 'n', 'u', 'l', 'l'})
	f.Fuzz(func(t *testing.T, code int, body []byte) {
		res, err := decodeOutcome(redisstore.Response{Code: code, Body: body})
		if err != nil {
			require.True(t, errors.Is(err, errUnreadable), "%v", err)
			return
		}
		b, err := res.MarshalJSON()
		require.NoError(t, err)
		require.True(t, json.Valid(b), "%s", b)
		delete(res.Meta, MetaReplayed)
		again, err := encodeOutcome(res.CallToolResult)
		require.NoError(t, err)
		res2, err := decodeOutcome(again)
		require.NoError(t, err)
		require.Equal(t, res.IsError, res2.IsError)
	})
}

// A replay's JSON is the stored bytes with members added to _meta (the
// replay mark, what the SDK sets through SetMeta) and members the SDK sets
// that they lack appended; the stored members keep their order and bytes.
func TestReplayAddsOnlyToMeta(t *testing.T) {
	stored := `{"_meta":{"trace":{"z":1,"a":2}},"content":[{"type":"text","text":"hi"}],"structuredContent":{"z":1,"big":12345678901234567890}}`
	res, err := decodeOutcome(redisstore.Response{Code: codeResult, Body: append([]byte{outcomeVersion}, stored...)})
	require.NoError(t, err)
	m := res.GetMeta()
	m["serverInfo"] = map[string]any{"name": "mailer"}
	res.SetMeta(m)
	b, err := json.Marshal(mcp.Result(res))
	require.NoError(t, err)
	require.Equal(t, `{"_meta":{"trace":{"z":1,"a":2},"idempotentReplayed":true,"serverInfo":{"name":"mailer"}},`+
		`"content":[{"type":"text","text":"hi"}],"structuredContent":{"z":1,"big":12345678901234567890}}`, string(b))

	// A stored result without _meta, or with content null, as an older
	// encoder may have written it.
	res, err = decodeOutcome(redisstore.Response{Code: codeResult, Body: append([]byte{outcomeVersion}, `{"content":null}`...)})
	require.NoError(t, err)
	b, err = json.Marshal(mcp.Result(res))
	require.NoError(t, err)
	require.Equal(t, `{"content":[],"_meta":{"idempotentReplayed":true}}`, string(b))
}
