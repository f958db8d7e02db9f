package grpcmw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/redisstore"
)

// scopeHint makes the scope configuration hint once per process.
var scopeHint sync.Once

// UnaryServerInterceptor returns an interceptor that runs each protected
// unary call once per (caller, idempotency key) with store: the first call
// runs the handler and stores its outcome, and every retry gets that
// outcome back (see the package documentation for every answer). Streaming
// calls are not covered: the package has no stream interceptor, so they
// pass through untouched. Put it after your authentication
// interceptor, whose caller Options.Scope reads, and after any recovery
// interceptor, so that a panicking handler releases its key before the
// panic is recovered.
//
// It panics if store is nil, opts holds a negative duration, or
// opts.Retention does not exceed the store's Lease and MaxDuration: all are
// programming errors. The interceptor is safe for concurrent use.
func UnaryServerInterceptor(store *redisstore.Store, opts Options) grpc.UnaryServerInterceptor {
	if store == nil {
		panic("grpcmw: nil store")
	}
	if err := store.ValidateRetention(opts.Retention); err != nil {
		panic("grpcmw: Options.Retention: " + err.Error())
	}
	so := store.Options()
	g := &guard{store: store, o: opts.withDefaults(), obs: so.Observer, lease: so.Lease}
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
	return g.intercept
}

type guard struct {
	store *redisstore.Store
	o     Options
	obs   observe.Observer
	lease time.Duration
	limit logLimit // the lines of a store that cannot be used: once per cause per minute
	// cutoff is done ShutdownGrace after Options.Shutdown: the handlers
	// still running are then cancelled. Nil without Options.Shutdown.
	cutoff context.Context
}

// call is one protected call, for the answers and the observer.
type call struct {
	ctx        context.Context
	method     string
	scope, key string
	err        error // the answer to a claim that failed
}

func (g *guard) intercept(ctx context.Context, req any, si *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if g.o.Match != nil && !g.o.Match(si.FullMethod) {
		return handler(ctx, req)
	}
	c := &call{ctx: ctx, method: si.FullMethod}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(MetadataKey)
	switch {
	case len(vals) == 0 && g.o.Optional:
		return handler(ctx, req)
	case len(vals) == 0:
		return nil, g.refuse(c, observe.Rejected, codes.InvalidArgument, ReasonKeyMissing,
			"this method requires an idempotency-key metadata: send one key per logical call (a UUID) and the same key on every retry of it")
	case g.o.Shutdown != nil && g.o.Shutdown.Err() != nil:
		// Stopping: nothing new is claimed here; the retry goes elsewhere.
		return nil, g.refuse(c, observe.Rejected, codes.Unavailable, ReasonShuttingDown,
			"the server is shutting down and takes no new calls; nothing ran: retry after the RetryInfo delay with the same key")
	case len(vals) > 1:
		return nil, g.refuse(c, observe.Rejected, codes.InvalidArgument, ReasonKeyMalformed,
			fmt.Sprintf("send exactly one idempotency-key metadata value, not %d", len(vals)))
	}
	key, reason := parseKey(vals[0])
	if reason != "" {
		return nil, g.refuse(c, observe.Rejected, codes.InvalidArgument, ReasonKeyMalformed,
			"malformed idempotency-key: "+reason+fmt.Sprintf(" (1 to %d visible ASCII characters, or an RFC 8941 string)", MaxKeyLen))
	}
	c.key = key
	scope, err := g.scope(c)
	if err != nil {
		return nil, err
	}
	c.scope = scope
	fp, err := g.o.Fingerprint(ctx, si.FullMethod, req)
	if err != nil {
		g.o.Logger.Error("grpcmw: Options.Fingerprint failed; the call was refused", "method", si.FullMethod, "err", err)
		return nil, g.refuse(c, observe.Rejected, codes.Internal, ReasonFingerprintFailed, "the server could not fingerprint the request")
	}
	label := si.FullMethod
	if len(label) > redisstore.MaxFieldLen {
		label = label[:redisstore.MaxFieldLen]
	}
	cl, err := g.claim(ctx, redisstore.Request{Scope: scope, Key: key, Fingerprint: fp, Label: label, Retention: g.o.Retention})
	if err != nil {
		if g.claimFailed(c, err) {
			return handler(ctx, req) // FailOpen
		}
		return nil, c.err
	}
	if cl.Status == redisstore.Replayed {
		return g.replay(c, cl.Response)
	}
	return g.run(c, cl.Lease, req, handler)
}

// refuse makes the interceptor's own answer, reports it and returns it.
func (g *guard) refuse(c *call, kind observe.Kind, code codes.Code, reason, msg string) error {
	var retry time.Duration
	if code == codes.Aborted || code == codes.Unavailable {
		retry = g.o.RetryAfter
	}
	err := answer(c.ctx, code, reason, "idemkey: "+msg, retry)
	g.observe(c, kind, func(e *observe.Event) { e.Problem, e.Status = reason, int(code) })
	return err
}

// scope returns the caller's scope, or the answer that refuses the call.
func (g *guard) scope(c *call) (string, error) {
	scope, err := g.o.Scope(c.ctx)
	switch {
	case errors.Is(err, ErrNoCredential):
		scopeHint.Do(func() {
			g.o.Logger.Error("grpcmw: a call presented no credential the default scope knows (authorization or x-api-key metadata, a TLS client certificate), so it was refused with Unauthenticated. " +
				"Set Options.Scope to your authenticated caller (an account or user ID), or to SharedScope for services without callers.")
		})
		return "", g.refuse(c, observe.Rejected, codes.Unauthenticated, ReasonScopeRequired,
			"the call presents no credential (authorization or x-api-key metadata) to keep its idempotency keys apart from other callers'")
	case err != nil:
		if st, ok := status.FromError(err); ok {
			g.observe(c, observe.Rejected, func(e *observe.Event) { e.Problem, e.Status = ReasonCallerUnknown, int(st.Code()) })
			return "", err
		}
		g.o.Logger.Warn("grpcmw: the caller could not be identified (Options.Scope failed)", "err", err)
		return "", g.refuse(c, observe.Rejected, codes.Unauthenticated, ReasonCallerUnknown, "the caller could not be identified")
	case scope == "" || len(scope) > redisstore.MaxFieldLen:
		scopeHint.Do(func() {
			g.o.Logger.Error("grpcmw: Options.Scope returned an empty scope or one over 1 KiB, so the call was refused with Internal. " +
				"Return the authenticated caller (an account or user ID), or an error when there is none.")
		})
		return "", g.refuse(c, observe.Rejected, codes.Internal, ReasonScopeInvalid, "the server could not scope the idempotency key")
	}
	return scope, nil
}

// claim claims req; in wait mode, while the key is in progress, it waits up
// to Options.Wait for the owner's outcome.
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

// claimFailed sets c.err to the answer to a claim that failed, and reports
// whether the call is to run unprotected instead (FailOpen).
func (g *guard) claimFailed(c *call, err error) (failOpen bool) {
	var expired *redisstore.ExpiredError
	switch {
	case errors.Is(err, redisstore.ErrInProgress):
		c.err = g.refuse(c, observe.InProgress, codes.Aborted, ReasonInProgress,
			"a call with this idempotency key is in progress; retry after the RetryInfo delay with the same key")
	case errors.Is(err, redisstore.ErrMismatch):
		c.err = g.refuse(c, observe.Mismatch, codes.FailedPrecondition, ReasonKeyReused,
			"this idempotency key was used for another request; use a new key for a new request")
	case errors.As(err, &expired):
		_ = grpc.SetHeader(c.ctx, metadata.Pairs(MetadataReplayed, "true"))
		c.err = g.refuse(c, observe.Expired, codes.FailedPrecondition, ReasonResponseExpired,
			fmt.Sprintf("the call with this idempotency key ran (it ended with code %s) but its outcome has expired; it will not run again with this key", codes.Code(expired.Code)))
	case c.ctx.Err() != nil:
		g.observe(c, observe.Unavailable, func(e *observe.Event) { e.Err = err })
		c.err = status.FromContextError(c.ctx.Err()).Err() // the caller is gone
	case errors.Is(err, redisstore.ErrInvalidRequest):
		g.o.Logger.Error("grpcmw: call refused by the store", "err", err)
		c.err = g.refuse(c, observe.Rejected, codes.Internal, ReasonScopeInvalid, "the server could not scope the idempotency key")
	case errors.Is(err, redisstore.ErrUnexpectedReply):
		g.o.Logger.Error("grpcmw: the store answered with something it does not understand; the call was refused", "err", err)
		c.err = g.refuse(c, observe.Unavailable, codes.Internal, ReasonStoreError, "the idempotency store answered unexpectedly")
	case g.o.FailOpen && unreachable(err):
		g.limit.log(g.o.Logger, slog.LevelWarn, "grpcmw: store unreachable, running unprotected", storeCause(err), "method", c.method, "err", err)
		g.observe(c, observe.FailOpen, func(e *observe.Event) { e.Err = err })
		return true
	default:
		g.limit.log(g.o.Logger, slog.LevelWarn, "grpcmw: store unavailable", storeCause(err), "err", err)
		c.err = g.refuse(c, observe.Unavailable, codes.Unavailable, ReasonStoreUnavailable,
			"the idempotency store is unavailable; nothing ran: retry after the RetryInfo delay with the same key")
	}
	return false
}

// unreachable reports whether a claim failed because Redis could not be
// reached (or did not answer in time), rather than because it answered.
func unreachable(err error) bool {
	var re redis.Error
	return !errors.Is(err, redisstore.ErrNotReplicated) && !errors.Is(err, redisstore.ErrEvicting) &&
		!errors.Is(err, redisstore.ErrNoPersistence) && !errors.As(err, &re)
}

// replay answers with a stored outcome and idempotency-replayed: true.
func (g *guard) replay(c *call, stored redisstore.Response) (any, error) {
	o, err := decodeOutcome(stored)
	var resp any
	var callErr error
	if err == nil {
		resp, callErr, err = o.result(g.o.Types)
	}
	if err != nil {
		g.o.Logger.Error("grpcmw: stored outcome unreadable; register its response type (Options.Types) or delete the record", "method", c.method, "err", err)
		return nil, g.refuse(c, observe.Replayed, codes.Internal, ReasonStoredUnreadable, "the stored outcome of this call cannot be replayed")
	}
	header := metadata.Join(o.header, metadata.Pairs(MetadataReplayed, "true"))
	_ = grpc.SetHeader(c.ctx, header)
	if len(o.trailer) > 0 {
		_ = grpc.SetTrailer(c.ctx, o.trailer)
	}
	g.observe(c, observe.Replayed, func(e *observe.Event) { e.Status = int(o.code) })
	return resp, callErr
}

// errExited stands for a handler that neither returned nor panicked
// (runtime.Goexit): its outcome is unknown, so the key is released.
var errExited = errors.New("grpcmw: handler exited without returning")

// run runs the handler as the key's owner, on a context detached from the
// caller's and supervised by the lease, and then stores its outcome or
// gives the key back.
func (g *guard) run(c *call, l *redisstore.Lease, req any, handler grpc.UnaryHandler) (resp any, err error) {
	// The run outlives its caller: a caller that gives up (deadline,
	// cancellation) must not stop the handler halfway after its side
	// effect, or its retry would run it again. The handler's context keeps
	// the call's values (metadata, peer, the transport stream) and is
	// cancelled only by a lost lease, MaxDuration or Options.Shutdown.
	ctx, cancel := context.WithCancelCause(context.WithValue(context.WithoutCancel(c.ctx), ctxKey{}, &info{key: c.key, lease: l, timeout: g.o.Timeout}))
	defer cancel(nil)
	rec := &recorder{inner: grpc.ServerTransportStreamFromContext(c.ctx), method: c.method}
	ctx = grpc.NewContextWithServerTransportStream(ctx, rec)
	stop := l.Supervise(cancel)
	if g.cutoff != nil {
		after := context.AfterFunc(g.cutoff, func() { cancel(ErrShutdown) })
		stopSupervise := stop
		stop = func() { after(); stopSupervise() }
	}
	started := time.Now()
	if l.Attempt > 1 {
		g.o.Logger.Info("grpcmw: took over a key whose earlier attempt ended without an outcome",
			"method", c.method, "attempt", l.Attempt, "recovery_point", l.RecoveryPoint)
	}
	kind := observe.Claimed
	if l.Attempt > 1 {
		kind = observe.TookOver
	}
	g.observe(c, kind, func(e *observe.Event) { e.Attempt = l.Attempt })

	returned := false
	defer func() {
		if returned {
			return
		}
		p := recover()
		stop()
		g.finish(c, l, ctx, rec, started, nil, nil, true)
		if p != nil {
			g.o.Logger.Warn("grpcmw: the handler panicked; its key is released", "method", c.method, "panic", p, "attempt", l.Attempt)
			panic(p)
		}
		err = status.Error(codes.Unknown, errExited.Error())
	}()
	resp, err = handler(ctx, req)
	returned = true
	stop()
	if fenced := g.finish(c, l, ctx, rec, started, resp, err, false); fenced != nil {
		return nil, fenced
	}
	return resp, err
}

// finish stores the outcome of a run, or gives its key back: a panic or a
// code that is not Final releases it, and a run stopped without an outcome
// (its context cancelled: shutdown, MaxDuration, a lost lease), whether it
// then returned or panicked, interrupts it, so that the retry takes the
// record over as the next attempt.
//
// It returns the answer that replaces the run's own when its outcome was
// fenced (another attempt took the key over and its outcome is the key's),
// else nil.
func (g *guard) finish(c *call, l *redisstore.Lease, hctx context.Context, rec *recorder, started time.Time, resp any, err error, panicked bool) (fenced error) {
	// The side effect has happened: storing its outcome is worth waiting for
	// up to the lease (no one else may take the key over before it ends).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), max(g.o.Timeout, g.lease))
	defer cancel()
	code := status.Code(err)
	kind, werr := observe.Completed, error(nil)
	switch {
	case panicked && hctx.Err() != nil:
		// Cut off, then panicked (a nil result of a call made on the
		// cancelled context): the run may have done its work, as one that
		// returned then. One rule with Store.Do and the HTTP middleware.
		kind, werr = observe.Released, l.Interrupt(ctx)
	case panicked:
		kind, werr = observe.Released, l.Release(ctx)
	case g.o.Final(code):
		header, trailer := rec.recorded()
		o, oerr := newOutcome(resp, err, header, trailer)
		if oerr != nil {
			g.o.Logger.Error("grpcmw: the outcome cannot be stored; the key is released", "method", c.method, "err", oerr)
			kind, werr = observe.Released, l.Release(ctx)
			break
		}
		werr = l.Complete(ctx, o.response())
		switch {
		case werr == nil:
		case errors.Is(werr, redisstore.ErrNotReplicated):
			g.o.Logger.Warn("grpcmw: outcome stored but not acknowledged by enough replicas; a failover now could lose it", "code", code, "err", werr)
		case errors.Is(werr, redisstore.ErrVanished):
			kind = observe.NotStored // the store logs it, once per cause per minute
		case errors.Is(werr, redisstore.ErrLeaseLost):
			// Another attempt owns the key: its outcome (stored, or to
			// come) is the key's one answer, so this run's must not reach
			// its caller, who would then hold an answer no retry gives.
			// The caller hears what a duplicate hears while the key is in
			// progress, and its retry with the key gets the key's answer.
			kind = observe.Fenced
			g.o.Logger.Warn("grpcmw: outcome not stored: the lease was lost (another attempt took the key over while this one ran); "+
				"the caller is told the call is in progress, so that its retry gets the key's outcome", "code", code, "attempt", l.Attempt)
			fenced = answer(c.ctx, codes.Aborted, ReasonInProgress,
				"idemkey: another attempt took this idempotency key over while this call ran, so its outcome is the key's; retry after the RetryInfo delay with the same key to get it", g.o.RetryAfter)
		default:
			kind = observe.NotStored
			g.o.Logger.Error("grpcmw: outcome may not be stored (Redis did not confirm it): a retry gets the replay if the write landed, "+
				"else, after the lease, runs the handler again unless it resumes from a checkpoint; the answer was sent anyway", "code", code, "err", werr)
		}
	case hctx.Err() != nil:
		kind, werr = observe.Released, l.Interrupt(ctx)
	default:
		kind, werr = observe.Released, l.Release(ctx)
	}
	if kind == observe.Released && werr != nil && !errors.Is(werr, redisstore.ErrLeaseLost) {
		g.o.Logger.Warn("grpcmw: release failed; the key stays held until its lease ends", "err", werr)
	}
	g.observe(c, kind, func(e *observe.Event) {
		e.Attempt, e.Status, e.Held, e.Err = l.Attempt, int(code), time.Since(started), werr
	})
	return fenced
}

// observe reports a decision to the store's observer, if any; a panicking
// observer cannot break the call.
func (g *guard) observe(c *call, kind observe.Kind, fill func(*observe.Event)) {
	if g.obs == nil {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			g.o.Logger.Error("grpcmw: the observer panicked", "panic", p)
		}
	}()
	e := observe.NewEvent(kind, c.scope, c.key)
	e.Route = c.method
	fill(&e)
	g.obs.Event(c.ctx, &e)
}

// recorder is the handler's grpc.ServerTransportStream: it passes header
// and trailer metadata on to the call's stream and keeps them, to store
// them with the outcome.
type recorder struct {
	inner           grpc.ServerTransportStream // nil outside a server
	method          string
	mu              sync.Mutex
	header, trailer metadata.MD
}

var _ grpc.ServerTransportStream = (*recorder)(nil)

func (r *recorder) Method() string { return r.method }

func (r *recorder) SetHeader(md metadata.MD) error {
	r.keep(&r.header, md)
	if r.inner == nil {
		return nil
	}
	return r.inner.SetHeader(md)
}

func (r *recorder) SendHeader(md metadata.MD) error {
	r.keep(&r.header, md)
	if r.inner == nil {
		return nil
	}
	return r.inner.SendHeader(md)
}

func (r *recorder) SetTrailer(md metadata.MD) error {
	r.keep(&r.trailer, md)
	if r.inner == nil {
		return nil
	}
	return r.inner.SetTrailer(md)
}

func (r *recorder) keep(into *metadata.MD, md metadata.MD) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*into = metadata.Join(*into, md)
}

func (r *recorder) recorded() (header, trailer metadata.MD) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.header.Copy(), r.trailer.Copy()
}
