package mcpmw_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/mcpmw"
	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/redisstore"
)

// A guarded call without a key, or with a malformed one, is a JSON-RPC
// invalid-params error that says what to send; nothing runs. With
// Options.Optional a call without a key runs unguarded.
func TestKeyMissingOrMalformedIsRefused(t *testing.T) {
	h := start(t, inMemory, setup{})
	cs := h.connect("alice")
	ctx := ctxT(t, 10*time.Second)
	_, err := email(ctx, cs, "", ann("hello"))
	require.EqualValues(t, jsonrpc.CodeInvalidParams, rpcCode(err))
	require.Equal(t, mcpmw.ReasonKeyMissing, mcpmw.Reason(nil, err))
	require.Contains(t, err.Error(), `the tool "send_email" requires an idempotency key in params._meta.idempotencyKey`)

	for _, bad := range []any{"", strings.Repeat("k", mcpmw.MaxKeyLen+1), "a\tb", "clé", 42, nil, map[string]any{}} {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "send_email", Arguments: ann("hello"), Meta: mcp.Meta{mcpmw.MetaKey: bad}})
		require.EqualValues(t, jsonrpc.CodeInvalidParams, rpcCode(err), "%#v", bad)
		require.Equal(t, mcpmw.ReasonKeyMalformed, mcpmw.Reason(nil, err), "%#v", bad)
	}
	_, err = email(ctx, cs, strings.Repeat("k", mcpmw.MaxKeyLen), ann("hello"))
	require.NoError(t, err, "the longest key")
	require.EqualValues(t, 1, h.sent.Load())

	opt := start(t, inMemory, setup{redis: h.redis, server: mcpmw.Options{Optional: true}})
	cs = opt.connect("alice")
	for range 2 {
		res, err := email(ctx, cs, "", ann("hello"))
		require.NoError(t, err)
		require.False(t, mcpmw.Replayed(res))
	}
	require.EqualValues(t, 2, opt.sent.Load(), "without a key, unguarded")
}

// Options.KeyArgument takes the key from a tool argument, for clients that
// cannot set _meta; the argument is not part of the fingerprint, and a
// call giving two different keys is refused.
func TestKeyArgument(t *testing.T) {
	h := start(t, inMemory, setup{server: mcpmw.Options{KeyArgument: "idempotency_key"}})
	cs := h.connect("alice")
	ctx := ctxT(t, 10*time.Second)
	args := func(key string) map[string]any {
		a := ann("hello")
		a["idempotency_key"] = key
		return a
	}
	first, err := email(ctx, cs, "", args("key-arg"))
	require.NoError(t, err)
	require.False(t, mcpmw.Replayed(first))
	again, err := email(ctx, cs, "key-arg", ann("hello")) // the same key in _meta, no argument
	require.NoError(t, err)
	require.True(t, mcpmw.Replayed(again), "one key, wherever it came from: %s", text(again))
	_, err = email(ctx, cs, "key-meta", args("key-arg"))
	require.Equal(t, mcpmw.ReasonKeyMalformed, mcpmw.Reason(nil, err))
	require.Contains(t, err.Error(), "two different keys")
	_, err = email(ctx, cs, "", ann("hello"))
	require.Contains(t, err.Error(), `(or the argument "idempotency_key")`)
	require.EqualValues(t, 1, h.sent.Load())
}

// The server advertises tools.idempotency among its experimental
// capabilities, saying where the key goes.
func TestCapabilityIsAdvertised(t *testing.T) {
	bothTransports(t, func(t *testing.T, tr transport) {
		h := start(t, tr, setup{server: mcpmw.Options{KeyArgument: "idempotency_key"}})
		cs := h.connect("alice")
		settings, ok := mcpmw.Advertised(cs.InitializeResult().Capabilities)
		require.True(t, ok, "%+v", cs.InitializeResult().Capabilities)
		require.Equal(t, mcpmw.MetaKey, settings["metaKey"])
		require.Equal(t, "idempotency_key", settings["keyArgument"])
		require.Equal(t, true, settings["keyRequired"])
		require.NotNil(t, cs.InitializeResult().Capabilities.Tools, "the SDK's own capabilities stay")
	})
}

// A scope function that fails refuses the call; the default scope refuses
// a call that presents no credential (the in-memory transport carries
// none) rather than share one scope among callers.
func TestCallerUnknownIsRefused(t *testing.T) {
	h := start(t, inMemory, setup{server: mcpmw.Options{Scope: mcpmw.DefaultScope}})
	ctx := ctxT(t, 10*time.Second)
	_, err := email(ctx, h.connect("alice"), "key-scope", ann("hello"))
	require.EqualValues(t, jsonrpc.CodeInvalidRequest, rpcCode(err))
	require.Equal(t, mcpmw.ReasonScopeRequired, mcpmw.Reason(nil, err))
	require.EqualValues(t, 0, h.sent.Load())

	shared := start(t, inMemory, setup{redis: h.redis, server: mcpmw.Options{Scope: mcpmw.SharedScope("local")}})
	ra, err := email(ctx, shared.connect("alice"), "key-scope", ann("hello"))
	require.NoError(t, err)
	rb, err := email(ctx, shared.connect("bob"), "key-scope", ann("hello"))
	require.NoError(t, err)
	require.True(t, mcpmw.Replayed(rb), "one shared scope, by choice")
	require.Equal(t, structured(t, ra), structured(t, rb))
}

// The client middleware gives each logical call its own key, keeps a key
// the caller set or pinned, and does not change the caller's params.
func TestClientMintsOneKeyPerCall(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	var h *harness
	h = start(t, inMemory, setup{client: &mcpmw.ClientOptions{}, email: func(ctx context.Context, req *mcp.CallToolRequest, in emailIn) (*mcp.CallToolResult, emailOut, error) {
		mu.Lock()
		keys = append(keys, mcpmw.Key(ctx))
		mu.Unlock()
		return h.send(ctx, req, in)
	}})
	cs := h.connect("alice")
	ctx := ctxT(t, 10*time.Second)
	p := &mcp.CallToolParams{Name: "send_email", Arguments: ann("hello")}
	for range 2 {
		res, err := cs.CallTool(ctx, p)
		require.NoError(t, err)
		require.False(t, mcpmw.Replayed(res), "one params value sent twice is two calls")
	}
	require.NotContains(t, p.Meta, mcpmw.MetaKey, "the caller's params get no key")
	require.Len(t, keys, 2)
	require.NotEqual(t, keys[0], keys[1])

	pinned := mcpmw.WithKey(ctx, "key-pinned")
	r1, err := cs.CallTool(pinned, &mcp.CallToolParams{Name: "send_email", Arguments: ann("hello")})
	require.NoError(t, err)
	r2, err := cs.CallTool(pinned, &mcp.CallToolParams{Name: "send_email", Arguments: ann("hello")})
	require.NoError(t, err)
	require.False(t, mcpmw.Replayed(r1))
	require.True(t, mcpmw.Replayed(r2), "a pinned key is one logical call")
	_, err = email(pinned, cs, "key-own", ann("hello"))
	require.NoError(t, err)
	require.Equal(t, "key-own", keys[len(keys)-1], "a key in _meta wins")
	_, err = email(ctx, cs, "bad key", ann("hello"))
	require.ErrorContains(t, err, "malformed idempotency key")
}

// A client whose attempt times out sends the call again with the same
// key: the server's run goes on, the retry is told it is in progress and
// retries after the delay, and gets the replay: one email.
func TestClientRetriesKeepTheKey(t *testing.T) {
	bothTransports(t, func(t *testing.T, tr transport) {
		entered, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		var h *harness
		inProgress := make(chan struct{}, 100)
		h = start(t, tr, setup{
			// The attempt timeout must fire: the tool is held until the
			// retries have been told "in progress", so 100ms is not a
			// bound on anything but how soon the client gives up.
			client: &mcpmw.ClientOptions{MaxAttempts: 50, AttemptTimeout: 100 * time.Millisecond},
			server: mcpmw.Options{RetryAfter: 10 * time.Millisecond},
			store: redisstoreObserving(func(reason string) {
				if reason == mcpmw.ReasonInProgress {
					select {
					case inProgress <- struct{}{}:
					default:
					}
				}
			}),
			email: func(ctx context.Context, req *mcp.CallToolRequest, in emailIn) (*mcp.CallToolResult, emailOut, error) {
				once.Do(func() { close(entered) })
				select {
				case <-release:
				case <-ctx.Done():
				}
				return h.send(ctx, req, in)
			}})
		cs := h.connect("alice")
		ctx := ctxT(t, 30*time.Second)
		go func() {
			<-entered
			<-inProgress // a retry of the timed-out attempt found it running
			close(release)
		}()
		res, err := email(ctx, cs, "", ann("hello"))
		require.NoError(t, err)
		require.True(t, mcpmw.Replayed(res), "the last attempt got the first one's result: %s", text(res))
		require.Equal(t, emailOut{ID: "msg_1", Attempt: 1}, structured(t, res))
		require.EqualValues(t, 1, h.sent.Load(), "emails sent")
	})
}

// The store's Observer sees each guarded call's decisions, named by the
// tool: a run (claimed, completed), a replay, a refusal.
func TestObserverSeesEachDecision(t *testing.T) {
	var mu sync.Mutex
	var kinds []string
	obs := observe.Func{OnEvent: func(_ context.Context, e *observe.Event) {
		mu.Lock()
		defer mu.Unlock()
		kinds = append(kinds, e.Kind.String()+" "+e.Route)
	}}
	h := start(t, inMemory, setup{store: redisstore.Options{Observer: obs}})
	cs := h.connect("alice")
	ctx := ctxT(t, 10*time.Second)
	_, err := email(ctx, cs, "key-observed", ann("hello"))
	require.NoError(t, err)
	_, err = email(ctx, cs, "key-observed", ann("hello"))
	require.NoError(t, err)
	_, err = email(ctx, cs, "key-observed", ann("goodbye"))
	require.Error(t, err)
	_, err = callTool(ctx, cs, "lookup", "", nil)
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{
		observe.Claimed.String() + " tools/call send_email",
		observe.Completed.String() + " tools/call send_email",
		observe.Replayed.String() + " tools/call send_email",
		observe.Mismatch.String() + " tools/call send_email",
	}, kinds, "an unguarded call is no decision")
}

// loseFirstCall is a RoundTripper that lets the first tools/call reach the
// server, reads the server's whole answer and then fails as a connection
// reset would: the tool ran, and its caller never heard.
type loseFirstCall struct {
	lost atomic.Bool
}

func (l *loseFirstCall) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		body = b
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || !bytes.Contains(body, []byte(`"method":"tools/call"`)) || !l.lost.CompareAndSwap(false, true) {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, errors.New("read tcp: connection reset by peer")
}

// A client whose transport fails after the server ran the call (the
// answer is lost: not a JSON-RPC error) sends it again with the same key
// and gets the replay: one email. A JSON-RPC error, the server's answer, is
// not retried.
func TestClientRetriesTransportErrorsWithTheKey(t *testing.T) {
	lossy := &loseFirstCall{}
	h := start(t, streamable, setup{
		client: &mcpmw.ClientOptions{MaxAttempts: 3, BaseDelay: time.Millisecond},
		http:   lossy,
	})
	cs := h.connect("alice")
	ctx := ctxT(t, 20*time.Second)
	res, err := email(ctx, cs, "", ann("hello"))
	require.NoError(t, err)
	require.True(t, lossy.lost.Load(), "the first answer was lost")
	require.True(t, mcpmw.Replayed(res), "the retry got the first run's result: %s", text(res))
	require.Equal(t, "msg_1", structured(t, res).ID)
	require.EqualValues(t, 1, h.sent.Load(), "emails sent")

	var refusals atomic.Int64
	obs := observe.Func{OnEvent: func(_ context.Context, e *observe.Event) {
		if e.Kind == observe.Mismatch {
			refusals.Add(1)
		}
	}}
	r := start(t, inMemory, setup{redis: h.redis, store: redisstore.Options{Observer: obs}, client: &mcpmw.ClientOptions{MaxAttempts: 3, BaseDelay: time.Millisecond}})
	rs := r.connect("alice")
	pinned := mcpmw.WithKey(ctx, "key-reused")
	_, err = email(pinned, rs, "", ann("hello"))
	require.NoError(t, err)
	_, err = email(pinned, rs, "", ann("goodbye"))
	require.Equal(t, mcpmw.ReasonKeyReused, mcpmw.Reason(nil, err))
	require.EqualValues(t, 1, refusals.Load(), "the JSON-RPC error was not retried")
}

// With Options.Optional, a key that is null or "" (in the key argument, as
// a model fills in an argument it has no value for, or in _meta) is no
// key: the call runs unguarded, never refused and never keyed by "".
func TestOptionalBlankKeyIsAbsent(t *testing.T) {
	h := start(t, inMemory, setup{server: mcpmw.Options{Optional: true, KeyArgument: "idempotency_key"}})
	cs := h.connect("alice")
	ctx := ctxT(t, 10*time.Second)
	for i, blank := range []any{nil, ""} {
		for range 2 {
			res, err := callTool(ctx, cs, "create_ticket", "", map[string]any{"title": "printer", "idempotency_key": blank})
			require.NoError(t, err, "argument %#v", blank)
			require.False(t, res.IsError, text(res))
			require.False(t, mcpmw.Replayed(res), "argument %#v: unguarded", blank)
		}
		for range 2 {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_ticket", Arguments: map[string]any{"title": "printer"}, Meta: mcp.Meta{mcpmw.MetaKey: blank}})
			require.NoError(t, err, "_meta %#v", blank)
			require.False(t, res.IsError, text(res))
			require.False(t, mcpmw.Replayed(res), "_meta %#v: unguarded", blank)
		}
		require.EqualValues(t, 4*(i+1), h.tickets.Load())
	}
	// A real key beside a blank argument is the key.
	for range 2 {
		_, err := callTool(ctx, cs, "create_ticket", "key-beside-blank", map[string]any{"title": "printer", "idempotency_key": ""})
		require.NoError(t, err)
	}
	require.EqualValues(t, 9, h.tickets.Load())
}

// The default scope refuses a call whose verified token has no user ID,
// telling the operator to set Options.Scope (a WARN, once), rather than
// hash the token into a scope of its own.
func TestTokenWithoutUserIDIsRefused(t *testing.T) {
	req := &mcp.CallToolRequest{Extra: &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{Scopes: []string{"mail"}}, Header: http.Header{"Authorization": {"Bearer t1"}}}}
	_, err := mcpmw.DefaultScope(context.Background(), req)
	require.ErrorIs(t, err, mcpmw.ErrNoUserID)
	require.ErrorContains(t, err, "Options.Scope")
	req.Extra.TokenInfo.UserID = "u1"
	scope, err := mcpmw.DefaultScope(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, "user:u1", scope)

	var logs bytes.Buffer
	var logMu sync.Mutex
	h := start(t, inMemory, setup{})
	mw := mcpmw.New(h.store, mcpmw.Options{Tools: []string{"send_email"},
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))})
	ran := 0
	handler := mw(func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ran++
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "sent"}}}, nil
	})
	ctx := ctxT(t, 10*time.Second)
	for range 2 {
		call := &mcp.CallToolRequest{
			Params: &mcp.CallToolParamsRaw{Name: "send_email", Meta: mcp.Meta{mcpmw.MetaKey: "key-no-user"}},
			Extra:  &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{Scopes: []string{"mail"}}, Header: http.Header{"Authorization": {"Bearer t1"}}},
		}
		_, err := handler(ctx, "tools/call", call)
		require.Equal(t, mcpmw.ReasonScopeRequired, mcpmw.Reason(nil, err), "%v", err)
		require.EqualValues(t, jsonrpc.CodeInternalError, rpcCode(err))
		require.ErrorContains(t, err, "Options.Scope")
	}
	require.Zero(t, ran, "nothing ran")
	logMu.Lock()
	defer logMu.Unlock()
	require.Equal(t, 1, strings.Count(logs.String(), "level=WARN"), "%s", logs.String())
	require.Contains(t, logs.String(), "Set Options.Scope")
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// By default the middleware fails closed: a tool the tools/list does not
// show (hidden by a middleware below it, or unknown), and every tool while
// the tools/list fails, is guarded, never taken for read-only.
func TestUnlistedToolIsGuarded(t *testing.T) {
	hide := func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if list, ok := res.(*mcp.ListToolsResult); ok && err == nil {
				shown := *list
				shown.Tools = nil
				for _, tool := range list.Tools {
					if tool.Name != "create_ticket" {
						shown.Tools = append(shown.Tools, tool)
					}
				}
				return &shown, nil
			}
			return res, err
		}
	}
	h := start(t, inMemory, setup{inner: hide})
	cs := h.connect("alice")
	ctx := ctxT(t, 10*time.Second)
	_, err := callTool(ctx, cs, "create_ticket", "", nil)
	require.Equal(t, mcpmw.ReasonKeyMissing, mcpmw.Reason(nil, err), "a hidden tool is guarded: %v", err)
	for range 2 {
		_, err := callTool(ctx, cs, "create_ticket", "key-hidden", nil)
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, h.tickets.Load())
	_, err = callTool(ctx, cs, "no_such_tool", "", nil)
	require.Equal(t, mcpmw.ReasonKeyMissing, mcpmw.Reason(nil, err), "an unknown tool is guarded: %v", err)
	_, err = callTool(ctx, cs, "no_such_tool", "key-unknown", nil)
	require.ErrorContains(t, err, "unknown tool", "the SDK answers it once the key is there")

	failList := func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/list" {
				return nil, errors.New("the tool registry is down")
			}
			return next(ctx, method, req)
		}
	}
	f := start(t, inMemory, setup{redis: h.redis, inner: failList})
	fs := f.connect("alice")
	_, err = callTool(ctx, fs, "lookup", "", nil)
	require.Equal(t, mcpmw.ReasonKeyMissing, mcpmw.Reason(nil, err), "with no tools/list even a read-only tool is guarded: %v", err)
	require.Zero(t, f.lookups.Load())
}

// A key that with the tool's name is over the store's 1 KiB limit is
// refused as malformed, saying so, before anything is claimed.
func TestKeyTooLongForTheToolIsRefusedClearly(t *testing.T) {
	tool := strings.Repeat("t", 900)
	h := start(t, inMemory, setup{server: mcpmw.Options{Tools: []string{tool}}})
	cs := h.connect("alice")
	ctx := ctxT(t, 10*time.Second)
	_, err := callTool(ctx, cs, tool, strings.Repeat("k", mcpmw.MaxKeyLen), nil)
	require.EqualValues(t, jsonrpc.CodeInvalidParams, rpcCode(err), "%v", err)
	require.Equal(t, mcpmw.ReasonKeyMalformed, mcpmw.Reason(nil, err))
	require.ErrorContains(t, err, "use a shorter key")
}
