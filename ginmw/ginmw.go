// Package ginmw is idemkey's Idempotency-Key middleware for Gin.
//
//	r.POST("/v1/payments", ginmw.New(store, ginmw.Options{}), createPayment)
//
// A request with an Idempotency-Key header runs its handler once per (caller,
// key); every retry gets the stored response with Idempotent-Replayed: true,
// a retry while the first attempt runs gets 409, and a key reused for a
// different request gets 422. The middleware captures whatever the handler
// writes (c.JSON, c.Data, c.Status without a body, c.Redirect, headers set
// before or after the status) and holds the response back until its outcome
// is stored. See the README for the full contract and Options for every
// setting.
//
// Handlers find their key, their lease, derived keys for downstream
// providers and recovery points through the gin.Context: Key, Lease,
// DerivedKey, Checkpoint and RecoveryPoint.
package ginmw

import (
	"bufio"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemkey/idemkey/internal/httpcore"
	"github.com/idemkey/idemkey/redisstore"
)

// Options configures the middleware; the zero value gives the defaults. It is
// the same type as httpmw.Options, where each field is listed with its
// default.
type Options = httpcore.Options

// ErrNotProtected is returned by Checkpoint for a request without a lease.
var ErrNotProtected = httpcore.ErrNotProtected

// DefaultScope is the default Options.Scope: a hash of the credential the
// request presents (Authorization, or X-API-Key), or "anonymous".
func DefaultScope(r *http.Request) (string, error) { return httpcore.DefaultScope(r) }

// DefaultStore is the default Options.Store: 200-499 except 408, 409, 425
// and 429.
func DefaultStore(status int) bool { return httpcore.DefaultStore(status) }

// DefaultOmitHeaders are the response headers never replayed by default.
var DefaultOmitHeaders = httpcore.DefaultOmitHeaders

// DefaultProblemBase is the default Options.ProblemBase.
const DefaultProblemBase = httpcore.DefaultProblemBase

// New returns Gin middleware that protects the handlers after it with store.
// It panics if store is nil or opts holds a negative limit.
func New(store *redisstore.Store, opts Options) gin.HandlerFunc {
	core := httpcore.New(store, opts)
	return func(c *gin.Context) {
		x, pass := core.Begin(c.Writer, c.Request)
		switch {
		case pass:
			c.Next()
			return
		case x == nil:
			c.Abort()
			return
		}
		orig, origReq := c.Writer, c.Request
		c.Writer = &writer{ResponseWriter: orig, rec: x.Recorder}
		c.Request = x.Request
		defer func() { c.Writer, c.Request = orig, origReq }()
		x.Run(c.Next)
	}
}

// writer gives the handlers Gin's writer semantics over the recorder: the
// status may change until the first byte of body (or WriteHeaderNow), and
// only then are the headers fixed.
type writer struct {
	gin.ResponseWriter // the real writer, for CloseNotify and Pusher
	rec                *httpcore.Recorder
}

var _ gin.ResponseWriter = (*writer)(nil)

func (w *writer) Header() http.Header { return w.rec.Header() }

func (w *writer) WriteHeader(code int) {
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

// Key returns the request's idempotency key, or "" when it is not protected.
func Key(c *gin.Context) string { return httpcore.Key(c.Request.Context()) }

// Lease returns the request's lease on its key, or nil when it is not
// protected. Its Attempt, RecoveryPoint and RecoveryData tell a handler
// whether an earlier attempt died and where it got to.
func Lease(c *gin.Context) *redisstore.Lease { return httpcore.Lease(c.Request.Context()) }

// DerivedKey returns the idempotency key to hand a downstream provider (a
// payment API, say) for one step of the request: the same on every retry and
// takeover, unique per (caller, key, step). It returns "" when the request is
// not protected.
func DerivedKey(c *gin.Context, step string) string {
	return httpcore.DerivedKey(c.Request.Context(), step)
}

// Checkpoint records that the handler reached point, with data a later
// attempt needs to resume (say, the provider's charge ID), and extends the
// lease. If this attempt dies, the next retry finds them with RecoveryPoint.
// It returns ErrNotProtected when the request is not protected.
func Checkpoint(c *gin.Context, point string, data []byte) error {
	return httpcore.Checkpoint(c.Request.Context(), point, data)
}

// RecoveryPoint returns the point and data an earlier attempt at this request
// checkpointed before it died, or "" and nil.
func RecoveryPoint(c *gin.Context) (point string, data []byte) {
	return httpcore.RecoveryPoint(c.Request.Context())
}
