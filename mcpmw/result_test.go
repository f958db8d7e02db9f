package mcpmw_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/mcpmw"
)

// topMembers returns the members of a JSON object as their bytes.
func topMembers(t *testing.T, b []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &m), "%s", b)
	return m
}

// A replay sends the stored result's JSON as the tool made it: its
// structured content (the order of its members, a number beyond float64),
// its content items (members the SDK's types know and their _meta) and its
// _meta, byte for byte, with only the replay mark added to _meta.
func TestReplayKeepsTheResultBytes(t *testing.T) {
	const structured = `{"zeta":1,"alpha":12345678901234567890,"nested":{"y":true,"b":1.50}}`
	const trace = `{"z":1,"a":[3,2,1]}`
	bothTransports(t, func(t *testing.T, tr transport) {
		var runs atomic.Int64
		h := start(t, tr, setup{tools: func(srv *mcp.Server) {
			srv.AddTool(&mcp.Tool{Name: "report", InputSchema: map[string]any{"type": "object"}},
				func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					runs.Add(1)
					return &mcp.CallToolResult{
						Meta: mcp.Meta{"trace": json.RawMessage(trace)},
						Content: []mcp.Content{&mcp.TextContent{Text: "the report", Meta: mcp.Meta{"z": 1, "a": "x"},
							Annotations: &mcp.Annotations{Audience: []mcp.Role{"user"}, Priority: 0.25}}},
						StructuredContent: json.RawMessage(structured),
					}, nil
				})
		}})
		cs := h.connect("alice")
		ctx := ctxT(t, 10*time.Second)
		first, err := callTool(ctx, cs, "report", "key-raw", nil)
		require.NoError(t, err)
		require.False(t, mcpmw.Replayed(first))
		firstRaw := topMembers(t, h.raw.last())
		require.Equal(t, structured, string(firstRaw["structuredContent"]), "the tool's bytes reach the first caller")

		again, err := callTool(ctx, cs, "report", "key-raw", nil)
		require.NoError(t, err)
		require.True(t, mcpmw.Replayed(again))
		againRaw := topMembers(t, h.raw.last())
		for _, name := range []string{"structuredContent", "content"} {
			require.Equal(t, string(firstRaw[name]), string(againRaw[name]), "%s replayed byte for byte", name)
		}
		meta := topMembers(t, againRaw["_meta"])
		require.Equal(t, trace, string(meta["trace"]), "the tool's _meta replayed byte for byte")
		require.Equal(t, "true", string(meta[mcpmw.MetaReplayed]))
		require.EqualValues(t, 1, runs.Load())
	})
}

// A result over Options.MaxResultBytes (1 MiB by default) reaches its
// caller but is not stored: every later call with its key gets the
// RESULT_TOO_LARGE tool error, marked replayed, with no retry delay, and
// the tool never runs again.
func TestOversizeResultIsNotStored(t *testing.T) {
	for _, c := range []struct {
		name  string
		limit int
		size  int
	}{
		{"default limit", 0, mcpmw.DefaultMaxResultBytes + 1},
		{"MaxResultBytes", 1024, 2048},
	} {
		t.Run(c.name, func(t *testing.T) {
			var runs atomic.Int64
			big := strings.Repeat("x", c.size)
			h := start(t, inMemory, setup{server: mcpmw.Options{MaxResultBytes: c.limit}, tools: func(srv *mcp.Server) {
				srv.AddTool(&mcp.Tool{Name: "export", InputSchema: map[string]any{"type": "object"}},
					func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
						runs.Add(1)
						return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: big}}}, nil
					})
			}})
			cs := h.connect("alice")
			ctx := ctxT(t, 20*time.Second)
			first, err := callTool(ctx, cs, "export", "key-big", nil)
			require.NoError(t, err)
			require.False(t, first.IsError)
			require.Equal(t, big, text(first), "the caller of the run gets the whole result")
			for range 2 {
				again, err := callTool(ctx, cs, "export", "key-big", nil)
				require.NoError(t, err)
				require.True(t, again.IsError)
				require.True(t, mcpmw.Replayed(again), "the call ran: the stand-in is a replay")
				require.Equal(t, mcpmw.ReasonResultTooLarge, mcpmw.Reason(again, nil))
				_, retry := mcpmw.RetryAfter(again)
				require.False(t, retry, "nothing to retry: the call ran")
				require.Contains(t, text(again), "will not run again")
			}
			require.EqualValues(t, 1, runs.Load(), "the key stays consumed")
		})
	}
}

// A tool that answers an isError result without a Go error after the
// middleware cut its context (here a graceful stop) was cut off, not
// decided: its record is kept, and the retry takes it over as attempt 2
// instead of replaying the error.
func TestCutOffToolErrorResultIsTakenOver(t *testing.T) {
	stopping, stop := context.WithCancel(context.Background())
	defer stop()
	entered := make(chan struct{}, 1)
	var attempts []int
	var runs atomic.Int64
	tool := func(srv *mcp.Server) {
		srv.AddTool(&mcp.Tool{Name: "charge", InputSchema: map[string]any{"type": "object"}},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				runs.Add(1)
				attempts = append(attempts, mcpmw.Attempt(ctx))
				if mcpmw.Attempt(ctx) == 1 {
					entered <- struct{}{}
					<-ctx.Done()
					return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "charge aborted: " + ctx.Err().Error()}}}, nil
				}
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "charged"}}}, nil
			})
	}
	a := start(t, inMemory, setup{server: mcpmw.Options{Shutdown: stopping, ShutdownGrace: -1}, tools: tool})
	ctx := ctxT(t, 20*time.Second)
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := callTool(ctx, a.connect("alice"), "charge", "key-cut-error", nil)
		if err != nil {
			res = &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
		}
		done <- res
	}()
	<-entered
	stop()
	first := <-done
	require.True(t, first.IsError, text(first))

	b := start(t, inMemory, setup{redis: a.redis, tools: tool})
	res, err := callTool(ctx, b.connect("alice"), "charge", "key-cut-error", nil)
	require.NoError(t, err)
	require.False(t, mcpmw.Replayed(res), "the cut-off run's error is not replayed: %s", text(res))
	require.Equal(t, "charged", text(res))
	require.Equal(t, []int{1, 2}, attempts, "the retry took the record over")
}
