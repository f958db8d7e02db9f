package mcpmw

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkey/idemkey/idemclient"
)

// ClientOptions configures NewClient. The zero value gives the defaults: a
// key for every tool call, and no retries of its own.
type ClientOptions struct {
	// Tools, if set, names the tools whose calls get a key; calls to the
	// others pass through untouched. Default: empty (every tool).
	Tools []string

	// NewKey mints the key of a call that has none. Default:
	// idemclient.NewKey, a UUIDv7.
	NewKey func() string

	// MaxAttempts, above 1, makes the middleware send a call again itself,
	// with the same key, up to this many attempts in all, while the call's
	// own context lives: after the server's answer that asks for it (the
	// first attempt is in progress, the server is stopping, its store is
	// unavailable: a tool error with _meta.retryAfterMs), after the delay
	// it asks for; and after an error that is not a JSON-RPC error (the
	// transport failed or lost the answer, an attempt ran out of
	// AttemptTimeout), after a backoff (BaseDelay, MaxDelay). A JSON-RPC
	// error is the server's answer (the key reused, a bad argument) and is
	// returned at once, and so is mcp.ErrConnectionClosed: the session is
	// gone, and a new one must send the call again, its key pinned with
	// WithKey. Default: 1 (no retries of its own).
	MaxAttempts int

	// AttemptTimeout, if set with MaxAttempts above 1, bounds each attempt,
	// so that an attempt stuck on a slow tool is given up and sent again
	// with the same key (the server's run goes on, and the retry gets the
	// in-progress answer and then the replay). Without retries it bounds
	// nothing: the call's context alone does. Default: 0 (no bound of its
	// own).
	AttemptTimeout time.Duration

	// BaseDelay is the backoff ceiling of the first retry of an attempt
	// that timed out; it doubles with each retry, with full jitter.
	// Default: 100ms.
	BaseDelay time.Duration

	// MaxDelay caps the backoff ceiling, and the delay the server asks
	// for. Default: 10s.
	MaxDelay time.Duration
}

func (o ClientOptions) withDefaults() ClientOptions {
	if o.NewKey == nil {
		o.NewKey = idemclient.NewKey
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 1
	}
	if o.BaseDelay == 0 {
		o.BaseDelay = 100 * time.Millisecond
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = 10 * time.Second
	}
	if o.MaxAttempts < 0 || o.AttemptTimeout < 0 || o.BaseDelay < 0 || o.MaxDelay < 0 {
		panic("mcpmw: negative value in ClientOptions")
	}
	return o
}

type clientKey struct{}

// WithKey returns a copy of ctx whose tool calls through NewClient's
// middleware carry key as their idempotency key. An agent that sends a
// call again on its own (after an error NewClient does not retry, on a new
// session after a reconnect, after a restart of the agent with the key
// saved) must pin the key this way: NewClient mints a fresh key for each
// call it is given, so a call sent again without WithKey is a new call and
// runs again. A key set in the call's params._meta.idempotencyKey wins over
// it.
//
// Every tool call made with the returned context, or with any context
// derived from it, carries key: use one such context for one logical call
// only. Two different calls made with it share the key: the second is
// refused as KEY_REUSED (other arguments of the same tool), or gets the
// first's result replayed without running (the same arguments); only
// calls to different tools stay apart. Never put a key on a long-lived
// context (a session's, a request's that makes several tool calls).
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, clientKey{}, key)
}

// NewClient returns a sending middleware, for
// mcp.Client.AddSendingMiddleware, that gives each tools/call without
// params._meta.idempotencyKey a key: WithKey's, or a fresh one
// (ClientOptions.NewKey), once per logical call, so that every retry of the
// call through it carries the same key. The caller's params are not
// changed (a copy is sent), so one params value sent twice is two calls;
// to repeat one logical call across calls, pin its key with WithKey.
//
// A key that breaks the key rules fails the call before anything is sent.
// With ClientOptions.MaxAttempts above 1 it also retries itself, honouring
// the server's retry delay. It panics on a negative option, a programming
// error. The middleware is safe for concurrent use.
func NewClient(opts ClientOptions) mcp.Middleware {
	o := opts.withDefaults()
	var tools map[string]bool
	if len(o.Tools) > 0 {
		tools = map[string]bool{}
		for _, t := range o.Tools {
			tools[t] = true
		}
	}
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			params, session := callParams(req)
			if method != methodCallTool || params == nil || (tools != nil && !tools[params.Name]) {
				return next(ctx, method, req)
			}
			p := *params
			if v, has := p.Meta[MetaKey]; has {
				if _, reason := parseKey(v); reason != "" {
					return nil, fmt.Errorf("mcpmw: malformed idempotency key in params._meta.%s: %s", MetaKey, reason)
				}
			} else {
				key, _ := ctx.Value(clientKey{}).(string)
				if key == "" {
					key = o.NewKey()
				}
				if _, reason := parseKey(key); reason != "" {
					return nil, fmt.Errorf("mcpmw: malformed idempotency key: %s", reason)
				}
				p.Meta = maps.Clone(p.Meta)
				if p.Meta == nil {
					p.Meta = mcp.Meta{}
				}
				p.Meta[MetaKey] = key
			}
			keyed := &mcp.ClientRequest[mcp.Params]{Session: session, Params: &p}
			return o.send(ctx, next, keyed)
		}
	}
}

// send sends req, and with MaxAttempts above 1 sends it again (the same
// key) while the answer asks for it.
func (o ClientOptions) send(ctx context.Context, next mcp.MethodHandler, req mcp.Request) (mcp.Result, error) {
	for attempt := 1; ; attempt++ {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if o.AttemptTimeout > 0 && o.MaxAttempts > 1 {
			actx, cancel = context.WithTimeout(ctx, o.AttemptTimeout)
		}
		res, err := next(actx, methodCallTool, req)
		cancel()
		if attempt >= o.MaxAttempts || ctx.Err() != nil {
			return res, err
		}
		var delay time.Duration
		switch tr, _ := res.(*mcp.CallToolResult); {
		case err != nil && !serverAnswer(err) && !errors.Is(err, mcp.ErrConnectionClosed):
			// Not the server's answer: the attempt timed out, or the
			// transport failed before or after the server ran the call.
			// The same key makes sending it again safe.
			ceiling := o.BaseDelay
			for i := 1; i < attempt && ceiling < o.MaxDelay; i++ {
				ceiling *= 2
			}
			delay = time.Duration(rand.Float64() * float64(min(ceiling, o.MaxDelay)))
		case err == nil:
			d, ok := RetryAfter(tr)
			if !ok {
				return res, err
			}
			delay = min(d, o.MaxDelay)
		default:
			return res, err
		}
		if d, has := ctx.Deadline(); has && time.Until(d) <= delay {
			return res, err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, err
		case <-t.C:
		}
	}
}

// codeRejectedByTransport is the code of the SDK's own error for a request
// its transport could not deliver or got no answer to (a failed POST, an
// HTTP 429, 502, 503 or 504): a *jsonrpc.Error the server did not send.
const codeRejectedByTransport = -32005

// serverAnswer reports whether err is a JSON-RPC error the server
// answered, not one the client's transport made.
func serverAnswer(err error) bool {
	var we *jsonrpc.Error
	return errors.As(err, &we) && we.Code != codeRejectedByTransport
}

// callParams returns the params and session of a tools/call request as a
// client sends it: ClientSession.CallTool sends a
// *mcp.ClientRequest[mcp.Params]; a typed one is accepted too.
func callParams(req mcp.Request) (*mcp.CallToolParams, *mcp.ClientSession) {
	switch r := req.(type) {
	case *mcp.ClientRequest[mcp.Params]:
		p, _ := r.Params.(*mcp.CallToolParams)
		return p, r.Session
	case *mcp.ClientRequest[*mcp.CallToolParams]:
		return r.Params, r.Session
	}
	return nil, nil
}
