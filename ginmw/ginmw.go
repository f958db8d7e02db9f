// Package ginmw is idemkey's Idempotency-Key middleware for Gin.
//
//	r.POST("/v1/payments", ginmw.New(store, ginmw.Options{Scope: callerID}), createPayment)
//
// A request with an Idempotency-Key header runs its handler once per (caller,
// key); every retry gets the stored response with Idempotent-Replayed: true,
// a retry while the first attempt runs gets 409, and a key reused for a
// different request gets 422. The middleware captures whatever the handler
// writes (c.JSON, c.Data, c.Status without a body, c.Redirect, headers set
// before or after the status) and holds the response back until its outcome
// is stored. See the README for the full contract and Options for every
// setting; DefaultScope and SharedScope are the Gin forms of httpmw's.
//
// Set Options.Scope to the caller your authentication put in the Gin context
// (c.GetString("user_id")), and mount the middleware after it. Without it,
// DefaultScope hashes the request's Authorization or X-API-Key header: a
// mobile client that refreshes its bearer token between two tries of one
// operation then lands in a new scope, and its retry runs again (the
// middleware warns once, at its first use).
//
// Handlers find their key, their attempt, derived keys for downstream
// providers and recovery points through the gin.Context: Key, Attempt,
// DerivedKey, Checkpoint and RecoveryPoint.
//
// The handler runs on a request context detached from the client's: a client
// that gives up does not stop it halfway. c.Request.Context() is cancelled
// only when the lease is lost, at the store's MaxDuration, or at the end of
// a graceful stop's grace (see below): pass it to the calls the handler makes (or c
// itself, with the engine's ContextWithFallback). A handler that records an
// error with c.Error and writes nothing gets it rendered by
// Options.ErrorHandler, the app's error middleware, inside the protected
// run: what it renders is the outcome, stored if final (a 4xx). Without
// ErrorHandler the handler has not answered: the key is released and the
// error middleware outside answers. Once the outcome is
// stored, the response on the wire is final: outer middleware cannot change
// it.
//
// # A graceful stop
//
// A server that stops on SIGTERM cancels the context it passed as
// Options.Shutdown and calls http.Server.Shutdown. What happens to a
// request, in order:
//
//  1. http.Server.Shutdown closes the listeners and the idle connections:
//     new connections go to the other instances.
//  2. A request that still reaches the middleware (on a connection that was
//     busy) is refused with 503 shutting-down, Retry-After and Connection:
//     close, before anything is claimed.
//  3. Handlers already running get Options.ShutdownGrace (default 5s) to
//     finish: their outcomes are stored and sent as on any other day.
//  4. The context of each handler still running is then cancelled, with
//     cause httpmw.ErrShutdown. A final answer it still gives is stored; otherwise
//     its record is kept and only its lease ends, so that the client's
//     retry, on another instance, takes the key over at once as attempt 2,
//     with the last checkpoint (RecoveryPoint): the run is never forgotten,
//     and never run again as if it had not started.
//  5. http.Server.Shutdown returns once every handler has returned and its
//     outcome is stored or its lease ended: give it a timeout above
//     ShutdownGrace plus Options.Timeout (or the store's lease, if longer).
//
// A process that dies without this (SIGKILL, a crash) holds its keys until
// their leases end; the retries then take over from the last checkpoint.
package ginmw

import (
	"bufio"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/idemkey/idemkey/internal/httpcore"
	"github.com/idemkey/idemkey/redisstore"
)

// DefaultScope is the default Options.Scope: httpmw.DefaultScope of the
// request, a hash of its Authorization or X-API-Key header. A request with
// neither is refused with 500 scope-required: an application with its own
// authentication sets Options.Scope to the caller it put in the Gin context.
//
// It suits long-lived API keys only: it follows the credential, not the
// caller, so a client that refreshes its bearer token between two tries of
// one operation lands in a new scope and the operation runs twice. A
// middleware on the default scope says so in a warning at its first use;
// idemkeytest.Config.SameCallerHeader tests a handler for it.
func DefaultScope(c *gin.Context) (string, error) { return httpcore.DefaultScope(c.Request) }

// SharedScope returns an Options.Scope that puts every caller in the scope
// name: whoever sends a key gets its outcome. Use it only where there are no
// callers to keep apart, never on an endpoint that serves several users. It
// panics if name is empty.
func SharedScope(name string) func(*gin.Context) (string, error) {
	httpcore.CheckSharedScope(name)
	return func(*gin.Context) (string, error) { return name, nil }
}

// New returns Gin middleware that protects the handlers after it with store.
// It panics if store is nil, opts holds a negative limit, or opts.Retention
// does not exceed the store's Lease and MaxDuration.
func New(store *redisstore.Store, opts Options) gin.HandlerFunc {
	cfg := opts.config()
	cfg.Route = func(_ *http.Request, c any) string { return c.(*gin.Context).FullPath() }
	core := httpcore.New(store, cfg)
	var hint sync.Once // the ErrorHandler hint, once per middleware
	return func(c *gin.Context) {
		x, pass := core.Begin(c.Writer, c.Request, c)
		switch {
		case pass != nil:
			orig := c.Request
			c.Request = pass
			c.Next()
			c.Request = orig
			return
		case x == nil: // a replay or a problem: final, as a stored response
			c.Abort()
			seal(c, core)
			return
		}
		orig, origReq := c.Writer, c.Request
		w := &writer{ResponseWriter: orig, rec: x.Recorder}
		c.Writer = w
		c.Request = x.Request
		defer func() {
			c.Request = origReq
			if !x.Answered() {
				c.Writer = orig // the key was released: the app answers (an error middleware, Recovery)
				return
			}
			// The stored response is on the wire and final.
			orig.WriteHeaderNow()
			w.sealed = sealed{ResponseWriter: orig, logger: core.Logger()}
			c.Writer = &w.sealed
		}()
		x.Run(func() {
			c.Next()
			if len(c.Errors) == 0 || !x.Recorder.Untouched() {
				return
			}
			// The handler recorded an error (c.Error) and wrote nothing: the
			// app's error middleware renders it, here, so that its answer is
			// the outcome.
			if opts.ErrorHandler != nil {
				opts.ErrorHandler(c)
			}
			if x.Recorder.Untouched() {
				// Nobody answered: an error middleware outside will. Release
				// the key rather than store the empty 200 Gin would send.
				if opts.ErrorHandler == nil {
					hint.Do(func() {
						core.Logger().Warn("idemkey: a handler recorded an error with c.Error and wrote nothing, so its key was released "+
							"and every retry runs it again; set ginmw.Options.ErrorHandler to your error middleware, so that what it "+
							"renders (a 4xx such as a declined card) is stored and replayed", "route", c.FullPath())
					})
				}
				x.Abandon()
			}
		})
	}
}

// seal makes the response on the wire final: no outer middleware may change
// its status or add to its body.
func seal(c *gin.Context, core *httpcore.Guard) {
	c.Writer.WriteHeaderNow()
	c.Writer = &sealed{ResponseWriter: c.Writer, logger: core.Logger()}
}

// sealed is the writer outer middleware sees once the stored response is
// sent: it drops every change, so the client gets exactly what was stored.
type sealed struct {
	gin.ResponseWriter
	logger *slog.Logger
	warned bool
}

func (w *sealed) drop(what string) {
	if !w.warned {
		w.warned = true
		w.logger.Warn("idemkey: a middleware outside ginmw tried to change a response after its outcome was stored; the change was dropped", "change", what)
	}
}

func (w *sealed) WriteHeader(code int) {
	if code != w.Status() {
		w.drop("status " + strconv.Itoa(code))
	}
}
func (w *sealed) WriteHeaderNow() {}
func (w *sealed) Write(p []byte) (int, error) {
	w.drop("body bytes")
	return len(p), nil
}
func (w *sealed) WriteString(s string) (int, error) {
	w.drop("body bytes")
	return len(s), nil
}

// writer gives the handlers Gin's writer semantics over the recorder: the
// status may change until the first byte of body (or WriteHeaderNow), and
// only then are the headers fixed.
type writer struct {
	gin.ResponseWriter // the real writer, for CloseNotify and Pusher
	rec                *httpcore.Recorder
	sealed             sealed // what outer middleware gets once the response is final
}

var _ gin.ResponseWriter = (*writer)(nil)

func (w *writer) Header() http.Header { return w.rec.Header() }

func (w *writer) WriteHeader(code int) {
	if code <= 0 {
		return // Gin's "keep the status" (c.Render(-1, ...), as c.Redirect does)
	}
	if code >= 100 && code < 200 {
		w.rec.WriteHeader(code)
		return
	}
	w.rec.SetStatus(code)
}

func (w *writer) WriteHeaderNow() { w.rec.Commit() }

func (w *writer) Write(p []byte) (int, error) {
	w.rec.Commit()
	return w.rec.WriteBody(p)
}

func (w *writer) WriteString(s string) (int, error) { return w.Write([]byte(s)) }

func (w *writer) Status() int { return w.rec.Status() }

func (w *writer) Size() int {
	if !w.rec.Committed() {
		return -1
	}
	return w.rec.Size()
}

func (w *writer) Written() bool { return w.rec.Committed() }

func (w *writer) Flush() { w.rec.Flush() }

func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) { return w.rec.Hijack() }

func (w *writer) Unwrap() http.ResponseWriter { return w.rec }

// Key returns the request's idempotency key: "" when it has none, or the
// middleware has not seen it.
func Key(c *gin.Context) string { return httpcore.Key(c.Request.Context()) }

// Attempt returns which attempt at its key the request runs as: 1 for the
// first, 2 or more when an earlier attempt ended without an answer (its
// process died, or it was cut off) and this one took the key over, so the
// side effects of that attempt may have happened: RecoveryPoint tells how
// far it got. It returns 0 when the request is not protected.
func Attempt(c *gin.Context) int { return httpcore.Attempt(c.Request.Context()) }

// DerivedKey returns the idempotency key to hand a downstream provider (a
// payment API, say) for one step of the request: the same on every retry and
// takeover, unique per (caller, key, step). For a request the middleware
// runs unprotected (Optional without a key, FailOpen with Redis down) it is
// a fresh random key per request and step, so the provider never gets an
// empty key, but nothing dedupes that request's retries (Attempt is 0). It
// returns "" on a route without the middleware.
func DerivedKey(c *gin.Context, step string) string {
	return httpcore.DerivedKey(c.Request.Context(), step)
}

// Checkpoint records that the handler reached point, with data a later
// attempt needs to resume (say, the provider's charge ID), and extends the
// lease. If this attempt dies, the next retry finds them with RecoveryPoint.
// For a request the middleware runs unprotected (Optional without a key,
// FailOpen) there is nothing to record: it does nothing and returns nil. It
// returns httpmw.ErrNotProtected on a route without the middleware.
func Checkpoint(c *gin.Context, point string, data []byte) error {
	return httpcore.Checkpoint(c.Request.Context(), point, data)
}

// RecoveryPoint returns the point and data an earlier attempt at this request
// checkpointed before it died, or "" and nil.
func RecoveryPoint(c *gin.Context) (point string, data []byte) {
	return httpcore.RecoveryPoint(c.Request.Context())
}
