package httpcore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/redisstore"
)

// scopeHint makes the scope configuration hint once per process.
var scopeHint sync.Once

// defaultScopeHint is what a Guard on the default scope logs at its first
// use: the hazard of a scope that follows the credential.
const defaultScopeHint = "idemkey: the default scope is in use: it hashes the request's Authorization (or X-API-Key) header, " +
	"so a client that refreshes its token between two tries of one operation lands in a new scope and its retry runs again. " +
	"Set Options.Scope to your authenticated caller (a user or account ID); the default suits long-lived API keys only."

// orderHint names the likely cause of a Scope that finds no caller.
const orderHint = "If logged-in users get this, the idempotency middleware probably runs before your authentication " +
	"middleware, so the caller is not known yet: mount it after (Gin: after the auth middleware in r.Use or in the route's " +
	"handlers; net/http: wrap the idempotency handler inside the auth handler)."

// ErrShutdown is the cause of the cancellation a handler's context sees when
// it is still running ShutdownGrace after Options.Shutdown is done.
var ErrShutdown = errors.New("idemkey: server shutting down")

// Guard runs the Idempotency-Key contract around an HTTP handler. The
// adapters in ginmw and httpmw call Begin before the application handler
// and Exchange.Finish after it. A Guard is safe for concurrent use.
type Guard struct {
	store       *redisstore.Store
	o           Config
	omit        map[string]bool  // response headers never stored: always-omitted ones and Options.OmitHeaders
	hintScope   *sync.Once       // the configuration hint about scopes, logged once per process
	hintOrder   sync.Once        // the hint about the order of middleware, logged once per Guard
	hintDefault sync.Once        // defaultScopeHint, logged once per Guard at the default scope's first use
	limit       logLimit         // the lines of a store that cannot be used: once per cause per minute
	obs         observe.Observer // the store's; nil when nobody observes
	lease       time.Duration    // the store's
	// running is cancelled ShutdownGrace after Options.Shutdown: the
	// handlers still running are then cancelled. Nil without
	// Options.Shutdown.
	running *running
	// The deadlines of the Redis calls: a claim's (Timeout) and a
	// completion's (the longer of Timeout and the lease).
	claimClock, finishClock *clock
	// lastLabel is the label of a path seen before, and labelMisses
	// counts the requests whose path was another (see label).
	lastLabel   atomic.Pointer[labelEntry]
	labelMisses atomic.Uint32
}

// labelEntry is a request's label for the record, with its method and path.
type labelEntry struct{ method, path, s string }

// label returns r's label, "POST /v1/payments", cut to the store's
// MaxFieldLen (it is only shown by inspect). A route's path is the same on
// every request more often than not: the last one is kept, so that its
// label costs no concatenation. Paths that vary replace it only once in 64
// requests, so that they do not pay an allocation more each.
func (h *Guard) label(r *http.Request) string {
	m, p := r.Method, r.URL.Path
	if l := h.lastLabel.Load(); l != nil && l.method == m && l.path == p {
		return l.s
	}
	s := m + " " + p
	if len(s) > redisstore.MaxFieldLen {
		s = s[:redisstore.MaxFieldLen]
	}
	if h.lastLabel.Load() == nil || h.labelMisses.Add(1)%64 == 0 {
		h.lastLabel.Store(&labelEntry{m, p, s})
	}
	return s
}

// New returns a Guard on store. It panics if store is nil, opts holds a
// negative limit, or a Retention the store refuses: all are programming
// errors.
func New(store *redisstore.Store, opts Config) *Guard {
	if store == nil {
		panic("idemkey: nil store")
	}
	o := opts.withDefaults()
	if err := store.ValidateRetention(o.Retention); err != nil {
		panic("idemkey: Options.Retention: " + err.Error())
	}
	omit := make(map[string]bool, len(alwaysOmitted)+len(o.OmitHeaders))
	for _, k := range alwaysOmitted {
		omit[k] = true
	}
	for _, k := range o.OmitHeaders {
		omit[k] = true
	}
	so := store.Options()
	h := &Guard{store: store, o: o, omit: omit, hintScope: &scopeHint, obs: so.Observer, lease: so.Lease,
		claimClock: newClock(o.Timeout), finishClock: newClock(max(o.Timeout, so.Lease))}
	if o.Shutdown != nil {
		h.running = &running{}
		context.AfterFunc(o.Shutdown, func() {
			if o.ShutdownGrace < 0 {
				h.running.cutAll()
				return
			}
			time.AfterFunc(o.ShutdownGrace, h.running.cutAll)
		})
	}
	return h
}

// Logger returns the logger the handler reports to.
func (h *Guard) Logger() *slog.Logger { return h.o.Logger }

// Exchange is one request the application handler must run: it owns the
// key's lease from Begin until Finish.
type Exchange struct {
	// Request is the request for the handler: its body can be read again,
	// and its context carries the lease (see Key, Attempt, Checkpoint).
	Request *http.Request
	// Recorder is the writer for the handler.
	Recorder *Recorder

	h         *Guard
	info      *Info
	cancel    context.CancelCauseFunc
	supervise func() // ends the lease's supervision
	abandoned bool
	answered  bool
	route     string    // for the observer
	started   time.Time // for the observer

	prev, next *Exchange // in the Guard's running list, when linked
	linked     bool

	// One allocation for the exchange and what it hands out: the
	// recorder, the Info and the body of the handler's request, the values
	// of its context, and the context of the completion's Redis call.
	rec  Recorder
	inf  Info
	body body
	vals runValues
	call callCtx
}

// runValues is the values of a run's context: the request's (without its
// cancellation) and the run's Info, in one value inside the exchange,
// where context.WithValue would be one more allocation.
type runValues struct {
	context.Context // context.WithoutCancel of the request's
	info            *Info
}

// Value returns the run's Info for ctxKey, else the request's value.
func (v *runValues) Value(key any) any {
	if key == (ctxKey{}) {
		return v.info
	}
	return v.Context.Value(key)
}

// stop ends the lease's supervision and the shutdown's watch over the run.
func (x *Exchange) stop() {
	if x.h.running != nil {
		x.h.running.remove(x)
	}
	x.supervise()
}

// Begin does everything before the application handler runs. It returns:
//   - pass != nil: the request is not protected: run the handler with the
//     original writer and pass. pass is r itself when the middleware does
//     not cover the request (its method, Skip); for one it runs without a
//     lease (Optional without a key, or Redis down with FailOpen), it is r
//     with a context that says so (Key, DerivedKey, Checkpoint).
//   - x != nil: the caller owns the key: run the handler with x.Request and
//     x.Recorder (or a writer over it), through x.Run.
//   - neither: Begin has written the response (a replay or a problem).
func (h *Guard) Begin(w http.ResponseWriter, r *http.Request, c any) (x *Exchange, pass *http.Request) {
	if h.obs == nil {
		return h.begin(w, r, c, nil)
	}
	n := &note{}
	x, pass = h.begin(w, r, c, n)
	h.observeBegin(r, c, n, x)
	return x, pass
}

// begin is Begin; n, when not nil, takes notes for the observer.
func (h *Guard) begin(w http.ResponseWriter, r *http.Request, c any, n *note) (x *Exchange, pass *http.Request) {
	if !slices.Contains(h.o.Methods, r.Method) || (h.o.Skip != nil && h.o.Skip(r, c)) {
		return nil, r
	}
	vals := r.Header.Values(h.o.Header)
	if len(vals) == 0 {
		if h.o.Optional {
			return nil, r.WithContext(unprotected(r.Context(), ""))
		}
		h.refuse(w, n, problemKeyMissing.with(fmt.Sprintf(detailKeyMissing, h.o.Header)))
		return nil, nil
	}
	if h.o.Shutdown != nil && h.o.Shutdown.Err() != nil {
		// Stopping: nothing new is claimed here, and the client's retry
		// goes to another instance (a keep-alive connection would bring it
		// back here).
		w.Header().Set("Connection", "close")
		h.refuse(w, n, &problemShuttingDown)
		return nil, nil
	}
	if len(vals) > 1 {
		h.refuse(w, n, h.keyProblem(fmt.Sprintf("send exactly one %s header, not %d", h.o.Header, len(vals))))
		return nil, nil
	}
	key, kerr := parseKey(vals[0])
	if kerr != nil {
		h.refuse(w, n, h.keyProblem(kerr.Reason))
		return nil, nil
	}
	scope, p := h.scope(r, c)
	n.keyed(scope, key)
	if p != nil {
		if p.status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", h.o.Challenge)
		}
		h.refuse(w, n, p)
		return nil, nil
	}
	body, p := h.readBody(w, r)
	if p != nil {
		h.refuse(w, n, p)
		return nil, nil
	}
	fp, p := h.fingerprint(r, body)
	if p != nil {
		h.refuse(w, n, p)
		return nil, nil
	}

	req := redisstore.Request{Scope: scope, Key: key, Fingerprint: fp, Label: h.label(r), Retention: h.o.Retention}
	cl, err := h.claim(r.Context(), req)
	if err != nil {
		if h.claimFailed(w, r, n, err) { // FailOpen
			pass = r.WithContext(unprotected(r.Context(), key))
			pass.Body = io.NopCloser(bytes.NewReader(body))
			return nil, pass
		}
		return nil, nil
	}
	if cl.Status == redisstore.Replayed {
		h.replay(w, cl.Response)
		n.set(observe.Replayed, "", nil)
		n.setStatus(cl.Response.Code)
		return nil, nil
	}
	return h.start(w, r, body, key, cl.Lease), nil
}

// claimFailed answers a claim that failed (in progress, mismatch, expired,
// Redis unreachable, ...) and reports whether the request is to run
// unprotected instead (FailOpen). It is apart from begin so that its
// variables cost nothing on the way of a claim that succeeds.
func (h *Guard) claimFailed(w http.ResponseWriter, r *http.Request, n *note, err error) (failOpen bool) {
	var (
		ip      *redisstore.InProgressError
		expired *redisstore.ExpiredError
	)
	switch {
	case errors.As(err, &ip):
		h.refuse(w, n, &problemInProgress)
		return false
	case errors.Is(err, redisstore.ErrMismatch):
		h.refuse(w, n, &problemKeyReused)
		return false
	case errors.As(err, &expired):
		h.expired(w, expired)
		n.set(observe.Expired, problemResponseExpired.slug, nil)
		n.setStatus(expired.Code)
		return false
	case r.Context().Err() != nil:
		n.set(observe.Unavailable, "", err)
		return false // the client is gone; nobody reads an answer
	case errors.Is(err, redisstore.ErrInvalidRequest): // a Scope function returning over 1 KiB
		h.o.Logger.Error("idemkey: request refused by the store", "err", err)
		h.refuse(w, n, &problemScopeInvalid)
		return false
	case errors.Is(err, redisstore.ErrUnexpectedReply):
		h.o.Logger.Error("idemkey: the store answered with something it does not understand; the request was refused", "err", err)
		h.refuse(w, n, &problemStoreError)
		return false
	case h.o.FailOpen && unreachable(err):
		h.limit.log(h.o.Logger, slog.LevelWarn, "idemkey: store unreachable, running unprotected", storeCause(err), "err", err)
		n.set(observe.FailOpen, "", err)
		return true
	default:
		h.limit.log(h.o.Logger, slog.LevelWarn, "idemkey: store unavailable", storeCause(err), "err", err)
		h.refuse(w, n, &problemUnavailable)
		n.set(observe.Unavailable, problemUnavailable.slug, err)
		return false
	}
}

// claim claims req; in wait mode, while the key is in progress, it waits up
// to Options.Wait for the owner's outcome (redisstore.Store.Await).
func (h *Guard) claim(ctx context.Context, req redisstore.Request) (*redisstore.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // the client has gone: claim nothing for nobody
	}
	var (
		c   *redisstore.Claim
		err error
	)
	if dl, ok := ctx.Deadline(); ok && dl.Before(time.Now().Add(h.o.Timeout)) {
		// The request's own deadline comes first: it bounds the claim.
		cctx, cancel := context.WithTimeout(ctx, h.o.Timeout)
		c, err = h.store.Claim(cctx, req)
		cancel()
	} else {
		cctx := &callCtx{}
		cctx.init(ctx, h.claimClock)
		c, err = h.store.Claim(cctx, req)
	}
	if h.o.Wait == 0 || !errors.Is(err, redisstore.ErrInProgress) {
		return c, err
	}
	wctx, cancel := context.WithTimeout(ctx, h.o.Wait)
	defer cancel()
	return h.store.Await(wctx, req)
}

// start sets up an exchange for the lease's owner: the request with its body
// restored and the lease in its context, the recorder, and the heartbeat.
func (h *Guard) start(w http.ResponseWriter, r *http.Request, data []byte, key string, l *redisstore.Lease) *Exchange {
	x := &Exchange{h: h}
	x.inf = Info{Key: key, Lease: l, timeout: h.o.Timeout}
	x.info = &x.inf
	// The run outlives its client: a client that gives up (times out,
	// disconnects) must not stop a handler halfway after its side effect,
	// or its retry would run it again. The handler's context keeps the
	// request's values and is cancelled only by a lost lease, MaxDuration
	// or Options.Shutdown.
	x.vals = runValues{Context: context.WithoutCancel(r.Context()), info: x.info}
	ctx, cancel := context.WithCancelCause(&x.vals)
	x.cancel = cancel
	x.Request = r.WithContext(ctx)
	x.body.Reset(data)
	x.Request.Body = &x.body
	x.Request.ContentLength = int64(len(data))
	x.rec.init(w, h.o.MaxResponseBytes, h.omit)
	x.Recorder = &x.rec

	x.supervise = l.Supervise(cancel)
	if h.running != nil {
		h.running.add(x, cancel)
	}
	return x
}

// scope returns the caller's scope, or the problem to answer.
func (h *Guard) scope(r *http.Request, c any) (string, *problem) {
	scope, err := h.o.Scope(r, c)
	switch {
	case errors.Is(err, ErrNoCredential):
		h.hintScope.Do(func() {
			h.o.Logger.Error("idemkey: a request presented no credential the default scope knows (Authorization or X-API-Key), so it was refused with 500 scope-required. " +
				"Set Options.Scope to your authenticated caller (an account or user ID), or to SharedScope for endpoints without callers.")
		})
		return "", &problemScopeRequired
	case err != nil:
		h.o.Logger.Warn("idemkey: the caller could not be identified (Options.Scope failed)", "err", err)
		h.hintOrder.Do(func() {
			h.o.Logger.Error("idemkey: Options.Scope found no caller, so the request was answered 401 caller-unknown. " + orderHint)
		})
		return "", &problemScope
	case scope == "":
		h.hintScope.Do(func() {
			h.o.Logger.Error("idemkey: Options.Scope returned an empty scope, so the request was refused with 500 scope-required. " +
				"Return the authenticated caller (an account or user ID), or an error when there is none. " + orderHint)
		})
		return "", &problemScopeRequired
	}
	if h.o.defaultScope {
		h.hintDefault.Do(func() { h.o.Logger.Warn(defaultScopeHint) })
	}
	return scope, nil
}

// unreachable reports whether a claim failed because Redis could not be
// reached (or did not answer in time), rather than because it answered.
func unreachable(err error) bool {
	var re redis.Error
	return !errors.Is(err, redisstore.ErrNotReplicated) && !errors.Is(err, redisstore.ErrUnexpectedReply) &&
		!errors.Is(err, redisstore.ErrEvicting) && !errors.Is(err, redisstore.ErrNoPersistence) && !errors.As(err, &re)
}

// refuse writes a problem and notes it for the observer.
func (h *Guard) refuse(w http.ResponseWriter, n *note, p *problem) {
	n.refused(p)
	h.fail(w, p)
}

// fail writes a problem, with Retry-After where the client should retry.
func (h *Guard) fail(w http.ResponseWriter, p *problem) {
	if p.status == http.StatusConflict || p.status == http.StatusServiceUnavailable {
		q := *p
		q.retryAfter = h.o.RetryAfter
		p = &q
	}
	p.write(w, h.o.ProblemBase)
}

func (h *Guard) keyProblem(detail string) *problem {
	return problemKeyMalformed.with(fmt.Sprintf(detailKeyMalformed, h.o.Header, detail, MaxKeyLen))
}
