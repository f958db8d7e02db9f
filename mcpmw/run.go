package mcpmw

import (
	"context"
	"errors"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/redisstore"
)

// errExited stands for a tool that neither returned nor panicked
// (runtime.Goexit): its outcome is unknown, so the key is released.
var errExited = errors.New("mcpmw: tool exited without returning")

// run runs the tool as the key's owner, on a context detached from the
// caller's and supervised by the lease, and then stores its result or
// gives the key back.
func (g *guard) run(c *call, l *redisstore.Lease, next mcp.MethodHandler, req *mcp.CallToolRequest) (res mcp.Result, err error) {
	// The run outlives its caller: an agent that times out (and cancels the
	// request) must not stop the tool halfway after its side effect, or its
	// retry would run it again. The context keeps the request's values (the
	// transport's routing of progress notifications among them) and is
	// cancelled only by a lost lease, MaxDuration or Options.Shutdown.
	ctx, cancel := context.WithCancelCause(context.WithValue(context.WithoutCancel(c.ctx), ctxKey{}, &info{key: c.key, lease: l, timeout: g.o.Timeout}))
	defer cancel(nil)
	stop := l.Supervise(cancel)
	if g.cutoff != nil {
		after := context.AfterFunc(g.cutoff, func() { cancel(ErrShutdown) })
		stopSupervise := stop
		stop = func() { after(); stopSupervise() }
	}
	started := time.Now()
	kind := observe.Claimed
	if l.Attempt > 1 {
		kind = observe.TookOver
		g.o.Logger.Info("mcpmw: took over a key whose earlier attempt ended without an outcome",
			"tool", c.tool, "attempt", l.Attempt, "recovery_point", l.RecoveryPoint)
	}
	g.observe(c, kind, func(e *observe.Event) { e.Attempt = l.Attempt })

	returned := false
	defer func() {
		if returned {
			return
		}
		p := recover()
		stop()
		g.finish(c, l, ctx, started, nil, errExited, true)
		if p == nil { // runtime.Goexit: let it go on
			return
		}
		// The SDK recovers nothing: a panic would end the whole server.
		// The key is released (nothing committed, as far as we know), and
		// the caller is told.
		g.o.Logger.Error("mcpmw: the tool panicked; its key is released", "tool", c.tool, "attempt", l.Attempt, "panic", p, "stack", stackOf())
		res, err = nil, rpcError(jsonrpc.CodeInternalError, ReasonToolPanicked, "the tool failed (it panicked); nothing was stored: a retry with the same key runs it again")
	}()
	res, err = next(ctx, methodCallTool, req)
	returned = true
	stop()
	g.finish(c, l, ctx, started, res, err, false)
	return res, err
}

// finish stores the result of a run, or gives its key back: a panic, a Go
// error (returned, or wrapped by the SDK into an isError result that keeps
// it: CallToolResult.GetError) and a result asking for input release it,
// and a run whose context ended without a result interrupts it, so that the
// retry takes the record over as the next attempt.
func (g *guard) finish(c *call, l *redisstore.Lease, hctx context.Context, started time.Time, res mcp.Result, err error, panicked bool) {
	// The side effect has happened: storing its outcome is worth waiting
	// for up to the lease (no one else may take the key over before it
	// ends).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), max(g.o.Timeout, g.lease))
	defer cancel()
	tr, _ := res.(*mcp.CallToolResult)
	if err == nil && tr != nil && tr.GetError() != nil {
		err = tr.GetError()
	}
	kind, status, werr := observe.Completed, 0, error(nil)
	switch {
	case panicked:
		kind, werr = observe.Released, l.Release(ctx)
	case err != nil && hctx.Err() != nil:
		kind, werr = observe.Released, l.Interrupt(ctx)
	case err != nil, tr == nil, tr.NeedsInput(), len(tr.InputRequests) > 0:
		kind, werr = observe.Released, l.Release(ctx)
	default:
		resp, eerr := encodeOutcome(tr)
		if eerr != nil {
			g.o.Logger.Error("mcpmw: the result cannot be stored; the key is released", "tool", c.tool, "err", eerr)
			kind, werr = observe.Released, l.Release(ctx)
			break
		}
		status = resp.Code
		werr = l.Complete(ctx, resp)
		switch {
		case werr == nil:
		case errors.Is(werr, redisstore.ErrNotReplicated):
			g.o.Logger.Warn("mcpmw: result stored but not acknowledged by enough replicas; a failover now could lose it", "tool", c.tool, "err", werr)
		case errors.Is(werr, redisstore.ErrLeaseLost):
			kind = observe.Fenced
			g.o.Logger.Warn("mcpmw: result not stored: the lease was lost (another attempt took the key over while this one ran)", "tool", c.tool, "attempt", l.Attempt)
		default:
			kind = observe.NotStored
			g.o.Logger.Error("mcpmw: result may not be stored (Redis did not confirm it): a retry gets the replay if the write landed, "+
				"else, after the lease, runs the tool again unless it resumes from a checkpoint; the answer was sent anyway", "tool", c.tool, "err", werr)
		}
	}
	if kind == observe.Released && werr != nil && !errors.Is(werr, redisstore.ErrLeaseLost) {
		g.o.Logger.Warn("mcpmw: release failed; the key stays held until its lease ends", "tool", c.tool, "err", werr)
	}
	g.observe(c, kind, func(e *observe.Event) {
		e.Attempt, e.Status, e.Held, e.Err = l.Attempt, status, time.Since(started), werr
	})
}
