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
// it: CallToolResult.GetError) and a result asking for input release it;
// a run whose context was cut off and that ended without a result, or with
// an error of any kind, interrupts it, so that the retry takes the record
// over as the next attempt.
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
	failed := panicked || err != nil || tr == nil || tr.IsError || tr.NeedsInput() || len(tr.InputRequests) > 0
	switch {
	case failed && hctx.Err() != nil:
		// Cut off (Shutdown, MaxDuration, a lost lease): whatever it
		// answered, a panic, a Go error or an isError result, is likely
		// the cut's doing, not the tool's decision, and it may have done
		// its side effect. The record is kept, only the lease ends: the
		// retry takes it over as the next attempt, with the last
		// checkpoint, as the HTTP middleware and Store.Do do.
		kind, werr = observe.Released, l.Interrupt(ctx)
		g.o.Logger.Warn("mcpmw: the run was cut off before it finished; its record is kept, so a retry takes it over as the next attempt",
			"tool", c.tool, "attempt", l.Attempt, "cause", context.Cause(hctx))
	case panicked, err != nil, tr == nil, tr.NeedsInput(), len(tr.InputRequests) > 0:
		kind, werr = observe.Released, l.Release(ctx)
	default:
		resp, eerr := encodeOutcome(tr)
		if eerr != nil {
			g.o.Logger.Error("mcpmw: the result cannot be stored; the key is released", "tool", c.tool, "err", eerr)
			kind, werr = observe.Released, l.Release(ctx)
			break
		}
		if size := len(resp.Body) - 1; size > g.o.MaxResultBytes {
			g.o.Logger.Warn("mcpmw: the result is over Options.MaxResultBytes, so it is not stored: its caller gets it, "+
				"a retry with its key gets the RESULT_TOO_LARGE tool error and the tool does not run again",
				"tool", c.tool, "bytes", size, "limit", g.o.MaxResultBytes)
			resp = encodeTooLarge(size, g.o.MaxResultBytes, tr.IsError)
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
