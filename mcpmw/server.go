package mcpmw

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/redisstore"
)

// The methods the middleware acts on.
const (
	methodCallTool   = "tools/call"
	methodListTools  = "tools/list"
	methodInitialize = "initialize"
	methodDiscover   = "server/discover"
)

// maxListPages bounds the tools/list pages read to find a tool's
// annotations.
const maxListPages = 100

// scopeHint makes the scope configuration hint once per process.
var scopeHint sync.Once

// New returns a receiving middleware, for mcp.Server.AddReceivingMiddleware,
// that runs each guarded tools/call once per (caller, tool, idempotency
// key) with store: the first call runs the tool and stores its result, and
// every retry gets that result back, marked _meta.idempotentReplayed: true
// (see the package documentation for every answer). It also advertises
// the experimental capability tools.idempotency in the server's initialize
// (and server/discover) result. Every other method passes through.
//
// Add it last (outermost), so that it sees calls before the middleware
// that handles them and a panicking tool releases its key before anything
// recovers it; it recovers a panic itself (the SDK does not). A replay it
// answers is an mcp.Result that embeds the decoded *mcp.CallToolResult
// (its fields readable, its _meta settable), not a *mcp.CallToolResult:
// it sends the stored bytes, so a middleware outside it can add to _meta
// but not change the content.
//
// It panics if store is nil, opts holds a negative duration, or
// opts.Retention does not exceed the store's Lease and MaxDuration: all
// are programming errors. The middleware is safe for concurrent use.
func New(store *redisstore.Store, opts Options) mcp.Middleware {
	if store == nil {
		panic("mcpmw: nil store")
	}
	if err := store.ValidateRetention(opts.Retention); err != nil {
		panic("mcpmw: Options.Retention: " + err.Error())
	}
	so := store.Options()
	g := &guard{store: store, o: opts.withDefaults(), obs: so.Observer, lease: so.Lease}
	if len(g.o.Tools) > 0 {
		g.tools = map[string]bool{}
		for _, t := range g.o.Tools {
			g.tools[t] = true
		}
	}
	g.omit = slices.Clone(g.o.Ignore)
	if g.o.KeyArgument != "" {
		g.omit = append(g.omit, g.o.KeyArgument)
	}
	g.capability = map[string]any{"metaKey": MetaKey, "replayedMetaKey": MetaReplayed}
	if g.o.KeyArgument != "" {
		g.capability["keyArgument"] = g.o.KeyArgument
	}
	if len(g.o.Tools) > 0 {
		g.capability["tools"] = slices.Sorted(maps.Keys(g.tools))
	}
	g.capability["keyRequired"] = !g.o.Optional
	if g.o.Shutdown != nil {
		cutoff, cut := context.WithCancel(context.Background())
		g.cutoff = cutoff
		grace := g.o.ShutdownGrace
		context.AfterFunc(g.o.Shutdown, func() {
			if grace < 0 {
				cut()
				return
			}
			time.AfterFunc(grace, cut)
		})
	}
	return g.middleware
}

type guard struct {
	store      *redisstore.Store
	o          Options
	obs        observe.Observer
	lease      time.Duration
	tools      map[string]bool // nil: every tool not annotated readOnlyHint
	omit       []string        // left out of the fingerprint
	capability map[string]any  // experimental.tools.idempotency
	// cutoff is done ShutdownGrace after Options.Shutdown: the tools still
	// running are then cancelled. Nil without Options.Shutdown.
	cutoff context.Context
	// noUserID makes the hint for a verified token without a user ID once.
	noUserID sync.Once
}

// call is one guarded call, for the answers and the observer.
type call struct {
	ctx        context.Context
	tool       string
	scope, key string
}

func (g *guard) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case methodCallTool:
			if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil {
				return g.callTool(ctx, next, r)
			}
		case methodInitialize, methodDiscover:
			res, err := next(ctx, method, req)
			if err == nil {
				g.advertise(res)
			}
			return res, err
		}
		return next(ctx, method, req)
	}
}

// advertise adds the capability to an initialize or discover result, on a
// copy of its capabilities (the SDK's may be shared).
func (g *guard) advertise(res mcp.Result) {
	var caps **mcp.ServerCapabilities
	switch r := res.(type) {
	case *mcp.InitializeResult:
		caps = &r.Capabilities
	case *mcp.DiscoverResult:
		caps = &r.Capabilities
	default:
		return
	}
	c := &mcp.ServerCapabilities{}
	if *caps != nil {
		cp := **caps
		c = &cp
	}
	c.Experimental = maps.Clone(c.Experimental)
	if c.Experimental == nil {
		c.Experimental = map[string]any{}
	}
	c.Experimental[Capability] = g.capability
	*caps = c
}

// guarded reports whether the middleware guards calls to tool.
func (g *guard) guarded(ctx context.Context, next mcp.MethodHandler, req *mcp.CallToolRequest) bool {
	if g.tools != nil {
		return g.tools[req.Params.Name]
	}
	cursor := ""
	for range maxListPages {
		res, err := next(ctx, methodListTools, &mcp.ListToolsRequest{Session: req.Session, Params: &mcp.ListToolsParams{Cursor: cursor}, Extra: req.Extra})
		if err != nil {
			// Guard it: a call that needs no guard loses nothing but the
			// need for a key; an unguarded one could run twice.
			g.o.Logger.Warn("mcpmw: tools/list failed, so the call is guarded", "tool", req.Params.Name, "err", err)
			return true
		}
		list, ok := res.(*mcp.ListToolsResult)
		if !ok {
			return true
		}
		for _, t := range list.Tools {
			if t != nil && t.Name == req.Params.Name {
				return t.Annotations == nil || !t.Annotations.ReadOnlyHint
			}
		}
		if list.NextCursor == "" {
			// Not listed: hidden by a middleware below, or unknown (the
			// SDK answers that once it runs). Nothing says it is
			// read-only, so it is guarded.
			return true
		}
		cursor = list.NextCursor
	}
	return true
}

func (g *guard) callTool(ctx context.Context, next mcp.MethodHandler, req *mcp.CallToolRequest) (mcp.Result, error) {
	if !g.guarded(ctx, next, req) {
		return next(ctx, methodCallTool, req)
	}
	c := &call{ctx: ctx, tool: req.Params.Name}
	key, found, reason := g.keyOf(req.Params)
	switch {
	case !found && g.o.Optional:
		return next(ctx, methodCallTool, req)
	case !found:
		where := "params._meta." + MetaKey
		if g.o.KeyArgument != "" {
			where += fmt.Sprintf(" (or the argument %q)", g.o.KeyArgument)
		}
		return nil, g.refuse(c, observe.Rejected, jsonrpc.CodeInvalidParams, ReasonKeyMissing,
			fmt.Sprintf("the tool %q requires an idempotency key in %s: send one key per logical call (a UUID) and the same key on every retry of it", c.tool, where))
	case g.o.Shutdown != nil && g.o.Shutdown.Err() != nil:
		g.observe(c, observe.Rejected, func(e *observe.Event) { e.Problem = ReasonShuttingDown })
		return retryLater(ReasonShuttingDown, "the server is shutting down and takes no new calls", g.o.RetryAfter), nil
	case reason != "":
		return nil, g.refuse(c, observe.Rejected, jsonrpc.CodeInvalidParams, ReasonKeyMalformed,
			"malformed idempotency key: "+reason+fmt.Sprintf(" (1 to %d visible ASCII characters)", MaxKeyLen))
	}
	if n := len(recordKey(c.tool, key)); n > redisstore.MaxFieldLen {
		return nil, g.refuse(c, observe.Rejected, jsonrpc.CodeInvalidParams, ReasonKeyMalformed,
			fmt.Sprintf("malformed idempotency key: with the tool's name it makes %d bytes; the limit is %d: use a shorter key", n, redisstore.MaxFieldLen))
	}
	c.key = key
	scope, err := g.scope(c, req)
	if err != nil {
		return nil, err
	}
	c.scope = scope
	fp, err := g.fingerprint(c.tool, req.Params.Arguments)
	if err != nil {
		return nil, g.refuse(c, observe.Rejected, jsonrpc.CodeInvalidParams, ReasonArgumentsInvalid, err.Error())
	}
	label := "tools/call " + c.tool
	if len(label) > redisstore.MaxFieldLen {
		label = label[:redisstore.MaxFieldLen]
	}
	cl, err := g.claim(ctx, redisstore.Request{Scope: scope, Key: recordKey(c.tool, key), Fingerprint: fp, Label: label, Retention: g.o.Retention})
	if err != nil {
		return g.claimFailed(c, err)
	}
	if cl.Status == redisstore.Replayed {
		return g.replay(c, cl.Response)
	}
	return g.run(c, cl.Lease, next, req)
}

// refuse makes the middleware's own JSON-RPC error, reports it and returns
// it.
func (g *guard) refuse(c *call, kind observe.Kind, code int64, reason, msg string) error {
	g.observe(c, kind, func(e *observe.Event) { e.Problem = reason })
	return rpcError(code, reason, msg)
}

// scope returns the caller's scope, or the answer that refuses the call.
func (g *guard) scope(c *call, req *mcp.CallToolRequest) (string, error) {
	scope, err := g.o.Scope(c.ctx, req)
	var we *jsonrpc.Error
	switch {
	case errors.Is(err, ErrNoUserID):
		g.noUserID.Do(func() {
			g.o.Logger.Warn("mcpmw: a call's verified token has no user ID, so the default scope refused it (it never hashes a verified token instead). " +
				"Set Options.Scope to your authenticated caller (say, from TokenInfo.Extra), or fill in TokenInfo.UserID in your TokenVerifier.")
		})
		return "", g.refuse(c, observe.Rejected, jsonrpc.CodeInternalError, ReasonScopeRequired,
			"the server cannot keep idempotency keys apart by caller: the call's verified token has no user ID, and the server sets no Options.Scope (the server's operator must set it)")
	case errors.Is(err, ErrNoCredential):
		scopeHint.Do(func() {
			g.o.Logger.Error("mcpmw: a call presented no credential the default scope knows (a verified token with a user ID, an Authorization or X-API-Key header), so it was refused. " +
				"Set Options.Scope to your authenticated caller (a user or tenant ID), or to SharedScope for a server with one client (stdio).")
		})
		return "", g.refuse(c, observe.Rejected, jsonrpc.CodeInvalidRequest, ReasonScopeRequired,
			"the call presents no credential to keep its idempotency keys apart from other callers'")
	case errors.As(err, &we):
		g.observe(c, observe.Rejected, func(e *observe.Event) { e.Problem = ReasonCallerUnknown })
		return "", err
	case err != nil:
		g.o.Logger.Warn("mcpmw: the caller could not be identified (Options.Scope failed)", "err", err)
		return "", g.refuse(c, observe.Rejected, jsonrpc.CodeInvalidRequest, ReasonCallerUnknown, "the caller could not be identified")
	case scope == "" || len(scope) > redisstore.MaxFieldLen:
		scopeHint.Do(func() {
			g.o.Logger.Error("mcpmw: Options.Scope returned an empty scope or one over 1 KiB, so the call was refused. " +
				"Return the authenticated caller (a user or tenant ID), or an error when there is none.")
		})
		return "", g.refuse(c, observe.Rejected, jsonrpc.CodeInternalError, ReasonScopeInvalid, "the server could not scope the idempotency key")
	}
	return scope, nil
}

// claim claims req; with Options.Wait, while the key is in progress, it
// waits up to Wait for the owner's outcome.
func (g *guard) claim(ctx context.Context, req redisstore.Request) (*redisstore.Claim, error) {
	cctx, cancel := context.WithTimeout(ctx, g.o.Timeout)
	cl, err := g.store.Claim(cctx, req)
	cancel()
	if g.o.Wait == 0 || !errors.Is(err, redisstore.ErrInProgress) {
		return cl, err
	}
	wctx, cancel := context.WithTimeout(ctx, g.o.Wait)
	defer cancel()
	return g.store.Await(wctx, req)
}

// claimFailed answers a claim that failed.
func (g *guard) claimFailed(c *call, err error) (mcp.Result, error) {
	var expired *redisstore.ExpiredError
	switch {
	case errors.Is(err, redisstore.ErrInProgress):
		g.observe(c, observe.InProgress, func(e *observe.Event) { e.Problem = ReasonInProgress })
		return retryLater(ReasonInProgress, "a call with this idempotency key is in progress", g.o.RetryAfter), nil
	case errors.Is(err, redisstore.ErrMismatch):
		return nil, g.refuse(c, observe.Mismatch, jsonrpc.CodeInvalidParams, ReasonKeyReused,
			fmt.Sprintf("this idempotency key was used for a call to %q with other arguments; use a new key for a new call", c.tool))
	case errors.As(err, &expired):
		return nil, g.refuse(c, observe.Expired, jsonrpc.CodeInvalidParams, ReasonResponseExpired,
			"the call with this idempotency key ran, but its result has expired; it will not run again with this key")
	case c.ctx.Err() != nil:
		g.observe(c, observe.Unavailable, func(e *observe.Event) { e.Err = err })
		return nil, c.ctx.Err() // the caller is gone
	case errors.Is(err, redisstore.ErrInvalidRequest):
		// The key, scope and label are checked before the claim, so this
		// is a limit of the store the checks do not know.
		g.o.Logger.Error("mcpmw: the store refused the call as invalid; nothing ran", "tool", c.tool, "err", err)
		return nil, g.refuse(c, observe.Rejected, jsonrpc.CodeInternalError, ReasonStoreError,
			"the idempotency store refused to record this call ("+err.Error()+"); nothing ran")
	case errors.Is(err, redisstore.ErrUnexpectedReply):
		g.o.Logger.Error("mcpmw: the store answered with something it does not understand; the call was refused", "err", err)
		return nil, g.refuse(c, observe.Unavailable, jsonrpc.CodeInternalError, ReasonStoreError, "the idempotency store answered unexpectedly")
	default:
		var re redis.Error
		if errors.As(err, &re) {
			g.o.Logger.Warn("mcpmw: the store answered with an error", "err", err)
		} else {
			g.o.Logger.Warn("mcpmw: store unavailable", "err", err)
		}
		g.observe(c, observe.Unavailable, func(e *observe.Event) { e.Problem, e.Err = ReasonStoreUnavailable, err })
		return retryLater(ReasonStoreUnavailable, "the idempotency store is unavailable", g.o.RetryAfter), nil
	}
}

// replay answers with a stored result, marked _meta.idempotentReplayed.
func (g *guard) replay(c *call, stored redisstore.Response) (mcp.Result, error) {
	res, err := decodeOutcome(stored)
	if err != nil {
		g.o.Logger.Error("mcpmw: stored outcome unreadable; delete the record (idemkey forget) to run the call again", "tool", c.tool, "err", err)
		return nil, g.refuse(c, observe.Replayed, jsonrpc.CodeInternalError, ReasonStoredUnreadable, "the stored result of this call cannot be replayed")
	}
	g.observe(c, observe.Replayed, func(e *observe.Event) { e.Status = stored.Code })
	return res, nil
}

// observe reports a decision to the store's observer, if any.
func (g *guard) observe(c *call, kind observe.Kind, fill func(*observe.Event)) {
	if g.obs == nil {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			g.o.Logger.Error("mcpmw: the observer panicked", "panic", p)
		}
	}()
	e := observe.NewEvent(kind, c.scope, c.key)
	e.Route = methodCallTool + " " + c.tool
	fill(&e)
	g.obs.Event(c.ctx, &e)
}

// stackOf keeps a panic's stack for the log.
func stackOf() string { return string(debug.Stack()) }
