package mcpmw_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/mcpmw"
)

// rpcCode returns the JSON-RPC code of err, or 0.
func rpcCode(err error) int64 {
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		return we.Code
	}
	return 0
}

// 20 calls at once with one key, waiting for the first (Options.Wait): the
// tool runs once, and all 20 get the same result, 19 of them marked
// replayed.
func TestConcurrentCallsOneKeyRunTheToolOnce(t *testing.T) {
	bothTransports(t, func(t *testing.T, tr transport) {
		entered, release := make(chan struct{}), make(chan struct{})
		var h *harness
		h = start(t, tr, setup{server: mcpmw.Options{Wait: time.Minute}, email: func(ctx context.Context, req *mcp.CallToolRequest, in emailIn) (*mcp.CallToolResult, emailOut, error) {
			close(entered) // a second run would panic here: the test holds that it never happens
			<-release
			return h.send(ctx, req, in)
		}})
		cs := h.connect("alice")
		ctx := ctxT(t, 30*time.Second)

		const n = 20
		results := make([]*mcp.CallToolResult, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		wg.Go(func() { results[0], errs[0] = email(ctx, cs, "key-concurrent", ann("hello")) })
		<-entered // the first holds the key; the others find it running
		for i := 1; i < n; i++ {
			wg.Go(func() { results[i], errs[i] = email(ctx, cs, "key-concurrent", ann("hello")) })
		}
		close(release)
		wg.Wait()

		require.EqualValues(t, 1, h.sent.Load(), "emails sent")
		replayed := 0
		for i := range n {
			require.NoError(t, errs[i])
			require.False(t, results[i].IsError, "call %d: %s", i, text(results[i]))
			require.Equal(t, emailOut{ID: "msg_1", Attempt: 1}, structured(t, results[i]), "call %d", i)
			require.Equal(t, text(results[0]), text(results[i]))
			if mcpmw.Replayed(results[i]) {
				replayed++
			}
		}
		require.False(t, mcpmw.Replayed(results[0]), "the call that ran is not a replay")
		require.Equal(t, n-1, replayed)
	})
}

// Without Options.Wait, a duplicate of a running call is told, as a tool
// error, that it is in progress, with the delay to retry after; retried
// once the first has finished, it gets the replay.
func TestDuplicateWhileRunningIsToldToRetry(t *testing.T) {
	bothTransports(t, func(t *testing.T, tr transport) {
		entered, release := make(chan struct{}), make(chan struct{})
		var h *harness
		h = start(t, tr, setup{server: mcpmw.Options{RetryAfter: 250 * time.Millisecond}, email: func(ctx context.Context, req *mcp.CallToolRequest, in emailIn) (*mcp.CallToolResult, emailOut, error) {
			close(entered)
			<-release
			return h.send(ctx, req, in)
		}})
		cs := h.connect("alice")
		ctx := ctxT(t, 30*time.Second)

		var first *mcp.CallToolResult
		var firstErr error
		done := make(chan struct{})
		go func() { defer close(done); first, firstErr = email(ctx, cs, "key-busy", ann("hello")) }()
		<-entered
		const dups = 5
		for range dups {
			res, err := email(ctx, cs, "key-busy", ann("hello"))
			require.NoError(t, err)
			require.True(t, res.IsError)
			require.Equal(t, mcpmw.ReasonInProgress, mcpmw.Reason(res, nil))
			d, ok := mcpmw.RetryAfter(res)
			require.True(t, ok, "a retry delay in _meta.%s", mcpmw.MetaRetryAfter)
			require.Equal(t, 250*time.Millisecond, d)
			require.Contains(t, text(res), "in progress")
			require.Contains(t, text(res), "retry in 250 ms")
			require.False(t, mcpmw.Replayed(res))
		}
		close(release)
		<-done
		require.NoError(t, firstErr)
		for range dups {
			res, err := email(ctx, cs, "key-busy", ann("hello"))
			require.NoError(t, err)
			require.True(t, mcpmw.Replayed(res))
			require.Equal(t, structured(t, first), structured(t, res))
		}
		require.EqualValues(t, 1, h.sent.Load())
	})
}

// A replay is the stored result (content and structured content) with
// _meta.idempotentReplayed: true; the original is not marked.
func TestReplayIsMarked(t *testing.T) {
	bothTransports(t, func(t *testing.T, tr transport) {
		h := start(t, tr, setup{})
		cs := h.connect("alice")
		ctx := ctxT(t, 10*time.Second)
		first, err := email(ctx, cs, "key-replay", ann("hello"))
		require.NoError(t, err)
		require.False(t, mcpmw.Replayed(first))
		for range 2 {
			again, err := email(ctx, cs, "key-replay", ann("hello"))
			require.NoError(t, err)
			require.True(t, mcpmw.Replayed(again))
			require.Equal(t, true, again.Meta[mcpmw.MetaReplayed])
			require.Equal(t, first.StructuredContent, again.StructuredContent)
			require.Equal(t, text(first), text(again))
			require.Equal(t, first.IsError, again.IsError)
		}
		require.EqualValues(t, 1, h.sent.Load())
	})
}

// The same key with other arguments is a JSON-RPC invalid-params error
// that names the key reuse; the tool does not run, and the original call
// still replays.
func TestOtherArgumentsAreRefused(t *testing.T) {
	bothTransports(t, func(t *testing.T, tr transport) {
		h := start(t, tr, setup{server: mcpmw.Options{Ignore: []string{"sent_at"}}})
		cs := h.connect("alice")
		ctx := ctxT(t, 10*time.Second)
		_, err := email(ctx, cs, "key-reuse", ann("hello"))
		require.NoError(t, err)

		res, err := email(ctx, cs, "key-reuse", ann("goodbye"))
		require.Error(t, err)
		require.Nil(t, res)
		require.EqualValues(t, jsonrpc.CodeInvalidParams, rpcCode(err))
		require.Equal(t, mcpmw.ReasonKeyReused, mcpmw.Reason(nil, err))
		require.Contains(t, err.Error(), "this idempotency key was used for a call to \"send_email\" with other arguments")
		require.EqualValues(t, 1, h.sent.Load())

		// Reordered, or differing only in what Options.Ignore names: the
		// same call.
		same := map[string]any{"subject": "hello", "to": "ann@example.com", "sent_at": "2026-01-02T03:04:05Z"}
		again, err := email(ctx, cs, "key-reuse", same)
		require.NoError(t, err)
		require.True(t, mcpmw.Replayed(again))
		require.EqualValues(t, 1, h.sent.Load())
	})
}

// A Go error from the tool releases the key: nothing is stored, and the
// retry runs the tool again. mcp.AddTool wraps the error into an isError
// result (CallToolResult.GetError keeps it for the middleware); a raw
// ToolHandler's error is a JSON-RPC error.
func TestHandlerErrorReleasesTheKey(t *testing.T) {
	bothTransports(t, func(t *testing.T, tr transport) {
		var fail sync.Mutex
		failing := true
		var h *harness
		h = start(t, tr, setup{email: func(ctx context.Context, req *mcp.CallToolRequest, in emailIn) (*mcp.CallToolResult, emailOut, error) {
			fail.Lock()
			defer fail.Unlock()
			if failing {
				return nil, emailOut{}, errors.New("the mail server is down")
			}
			return h.send(ctx, req, in)
		}})
		cs := h.connect("alice")
		ctx := ctxT(t, 10*time.Second)

		res, err := email(ctx, cs, "key-error", ann("hello"))
		require.NoError(t, err)
		require.True(t, res.IsError)
		require.Contains(t, text(res), "the mail server is down")
		fail.Lock()
		failing = false
		fail.Unlock()
		res, err = email(ctx, cs, "key-error", ann("hello"))
		require.NoError(t, err)
		require.False(t, res.IsError, text(res))
		require.False(t, mcpmw.Replayed(res), "the retry ran the tool")
		require.Equal(t, "msg_1", structured(t, res).ID)

		h.failTicket.Store(true)
		_, err = callTool(ctx, cs, "create_ticket", "key-error", map[string]any{"title": "printer"})
		require.ErrorContains(t, err, "the ticket system is down")
		h.failTicket.Store(false)
		res, err = callTool(ctx, cs, "create_ticket", "key-error", map[string]any{"title": "printer"})
		require.NoError(t, err)
		require.False(t, mcpmw.Replayed(res))
		require.Equal(t, "ticket T-1", text(res))
	})
}

// A result with isError: true that the tool returned without a Go error is
// the tool's decision: it is stored and replayed.
func TestToolErrorResultIsStored(t *testing.T) {
	bothTransports(t, func(t *testing.T, tr transport) {
		var h *harness
		h = start(t, tr, setup{email: func(ctx context.Context, req *mcp.CallToolRequest, in emailIn) (*mcp.CallToolResult, emailOut, error) {
			h.sent.Add(1)
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no such mailbox"}}}, emailOut{}, nil
		}})
		cs := h.connect("alice")
		ctx := ctxT(t, 10*time.Second)
		first, err := email(ctx, cs, "key-declined", ann("hello"))
		require.NoError(t, err)
		require.True(t, first.IsError)
		again, err := email(ctx, cs, "key-declined", ann("hello"))
		require.NoError(t, err)
		require.True(t, again.IsError)
		require.True(t, mcpmw.Replayed(again))
		require.Equal(t, "no such mailbox", text(again))
		require.Empty(t, mcpmw.Reason(again, nil), "the tool's error, not the middleware's")
		require.EqualValues(t, 1, h.sent.Load())
	})
}

// A panic releases the key: the caller gets a JSON-RPC internal error
// (the server goes on: the SDK recovers nothing), and the retry runs the
// tool again.
func TestPanicReleasesTheKey(t *testing.T) {
	bothTransports(t, func(t *testing.T, tr transport) {
		var mu sync.Mutex
		panicking := true
		var h *harness
		h = start(t, tr, setup{email: func(ctx context.Context, req *mcp.CallToolRequest, in emailIn) (*mcp.CallToolResult, emailOut, error) {
			mu.Lock()
			p := panicking
			panicking = false
			mu.Unlock()
			if p {
				panic("the template engine blew up")
			}
			return h.send(ctx, req, in)
		}})
		cs := h.connect("alice")
		ctx := ctxT(t, 10*time.Second)
		_, err := email(ctx, cs, "key-panic", ann("hello"))
		require.Error(t, err)
		require.EqualValues(t, jsonrpc.CodeInternalError, rpcCode(err))
		require.Equal(t, mcpmw.ReasonToolPanicked, mcpmw.Reason(nil, err))
		res, err := email(ctx, cs, "key-panic", ann("hello"))
		require.NoError(t, err)
		require.False(t, mcpmw.Replayed(res))
		require.Equal(t, emailOut{ID: "msg_1", Attempt: 1}, structured(t, res), "a released key runs as a fresh attempt")
	})
}

// A run cut off by its context (here a graceful stop: Options.Shutdown with
// no grace) keeps its record: the retry, on another server, takes it over
// as attempt 2, with the checkpoint if there was one and the same derived
// key. (Without a checkpoint a released record would be forgotten and run
// as attempt 1: the bare key tells the two apart.)
func TestCutOffRunIsTakenOverAsAttempt2(t *testing.T) {
	bothTransports(t, func(t *testing.T, tr transport) {
		stopping, stop := context.WithCancel(context.Background())
		defer stop()
		type seen struct {
			attempt  int
			point    string
			data     string
			derived  string
			cutCause error
		}
		runs := map[string]chan seen{"key-cutoff": make(chan seen, 2), "key-cutoff-bare": make(chan seen, 2)}
		var entered sync.WaitGroup
		entered.Add(2)
		cutOff := func(ctx context.Context, req *mcp.CallToolRequest, in emailIn) (*mcp.CallToolResult, emailOut, error) {
			point, data := mcpmw.RecoveryPoint(ctx)
			s := seen{attempt: mcpmw.Attempt(ctx), point: point, data: string(data), derived: mcpmw.DerivedKey(ctx, "send")}
			key := mcpmw.Key(ctx)
			if s.attempt == 1 {
				if key == "key-cutoff" {
					if err := mcpmw.Checkpoint(ctx, "rendered", []byte("draft-7")); err != nil {
						return nil, emailOut{}, err
					}
				}
				entered.Done()
				<-ctx.Done() // the graceful stop cuts it off
				s.cutCause = context.Cause(ctx)
				runs[key] <- s
				return nil, emailOut{}, ctx.Err()
			}
			runs[key] <- s
			return nil, emailOut{ID: "msg_resumed", Attempt: s.attempt}, nil
		}
		a := start(t, tr, setup{server: mcpmw.Options{Shutdown: stopping, ShutdownGrace: -1}, email: cutOff})
		ctx := ctxT(t, 20*time.Second)
		cs := a.connect("alice")
		done := make(chan error, 2)
		for key := range runs {
			go func() { _, err := email(ctx, cs, key, ann("hello")); done <- err }()
		}
		entered.Wait()
		stop()
		first := map[string]seen{}
		for key, ch := range runs {
			first[key] = <-ch
			require.ErrorIs(t, first[key].cutCause, mcpmw.ErrShutdown)
			require.NoError(t, <-done)
		}

		// The stopping server takes no new call: the retry goes elsewhere.
		res, err := email(ctx, cs, "key-cutoff", ann("hello"))
		require.NoError(t, err)
		require.Equal(t, mcpmw.ReasonShuttingDown, mcpmw.Reason(res, nil))
		_, ok := mcpmw.RetryAfter(res)
		require.True(t, ok)

		b := start(t, tr, setup{redis: a.redis, email: cutOff})
		bs := b.connect("alice")
		for key, ch := range runs {
			res, err = email(ctx, bs, key, ann("hello"))
			require.NoError(t, err)
			require.False(t, res.IsError, text(res))
			second := <-ch
			require.Equal(t, 2, second.attempt, key)
			require.Equal(t, first[key].derived, second.derived, "the provider sees one key across attempts")
			require.Equal(t, emailOut{ID: "msg_resumed", Attempt: 2}, structured(t, res))
			if key == "key-cutoff" {
				require.Equal(t, "rendered", second.point)
				require.Equal(t, "draft-7", second.data)
			} else {
				require.Empty(t, second.point)
			}
		}
	})
}

// Two callers with one key stay apart: each runs its own call and replays
// its own result.
func TestTwoCallersOneKeyStayApart(t *testing.T) {
	bothTransports(t, func(t *testing.T, tr transport) {
		h := start(t, tr, setup{})
		alice, bob := h.connect("alice"), h.connect("bob")
		ctx := ctxT(t, 10*time.Second)
		ra, err := email(ctx, alice, "key-shared", ann("hello"))
		require.NoError(t, err)
		rb, err := email(ctx, bob, "key-shared", ann("hello"))
		require.NoError(t, err)
		require.False(t, mcpmw.Replayed(rb), "bob's call ran: alice's result is not his")
		require.NotEqual(t, structured(t, ra).ID, structured(t, rb).ID)
		require.EqualValues(t, 2, h.sent.Load())
		// Other arguments under bob's key are his business, not a reuse of alice's.
		for _, c := range []struct {
			cs   *mcp.ClientSession
			want *mcp.CallToolResult
		}{{alice, ra}, {bob, rb}} {
			again, err := email(ctx, c.cs, "key-shared", ann("hello"))
			require.NoError(t, err)
			require.True(t, mcpmw.Replayed(again))
			require.Equal(t, structured(t, c.want), structured(t, again))
		}
	})
}

// One key on two tools is two records: each tool runs.
func TestOneKeyOnTwoToolsNeverCollides(t *testing.T) {
	bothTransports(t, func(t *testing.T, tr transport) {
		h := start(t, tr, setup{})
		cs := h.connect("alice")
		ctx := ctxT(t, 10*time.Second)
		_, err := email(ctx, cs, "key-two-tools", ann("hello"))
		require.NoError(t, err)
		res, err := callTool(ctx, cs, "create_ticket", "key-two-tools", ann("hello"))
		require.NoError(t, err)
		require.False(t, mcpmw.Replayed(res))
		require.Equal(t, "ticket T-1", text(res))
		require.EqualValues(t, 1, h.sent.Load())
	})
}

// A tool the middleware does not guard is untouched: read-only by its
// annotation (the default), or not in Options.Tools. It needs no key, runs
// on every call and its results are never marked.
func TestNonGuardedToolIsUntouched(t *testing.T) {
	bothTransports(t, func(t *testing.T, tr transport) {
		h := start(t, tr, setup{})
		cs := h.connect("alice")
		ctx := ctxT(t, 10*time.Second)
		for i, key := range []string{"", "key-lookup", "key-lookup"} {
			res, err := callTool(ctx, cs, "lookup", key, nil)
			require.NoError(t, err)
			require.Equal(t, fmt.Sprintf("lookup %d", i+1), text(res))
			require.Nil(t, res.Meta[mcpmw.MetaReplayed])
		}

		only := start(t, tr, setup{redis: h.redis, server: mcpmw.Options{Tools: []string{"create_ticket"}}})
		cs = only.connect("alice")
		for range 2 {
			res, err := email(ctx, cs, "", ann("hello"))
			require.NoError(t, err)
			require.False(t, res.IsError, text(res))
		}
		require.EqualValues(t, 2, only.sent.Load())
		_, err := callTool(ctx, cs, "create_ticket", "", nil)
		require.Equal(t, mcpmw.ReasonKeyMissing, mcpmw.Reason(nil, err))
	})
}

// With Redis unreachable a guarded call gets a tool error to retry after
// the delay, and the tool does not run; an unguarded one runs.
func TestStoreDownToolDoesNotRun(t *testing.T) {
	h := start(t, inMemory, setup{})
	cs := h.connect("alice")
	ctx := ctxT(t, 20*time.Second)
	h.redis.Kill()
	res, err := email(ctx, cs, "key-down", ann("hello"))
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.Equal(t, mcpmw.ReasonStoreUnavailable, mcpmw.Reason(res, nil))
	_, ok := mcpmw.RetryAfter(res)
	require.True(t, ok)
	require.EqualValues(t, 0, h.sent.Load(), "no email without the store")
	lookup, err := callTool(ctx, cs, "lookup", "", nil)
	require.NoError(t, err)
	require.Equal(t, "lookup 1", text(lookup))
}
