package payments

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemkey/idemkey/ginmw"
)

// dropResponse carries out FaultDropResponse. It runs outside the
// idempotency middleware, which holds an execution's answer back until its
// outcome is stored and only then writes it to this writer: so at that
// first write the outcome is in Redis, and the connection is closed instead.
func (a *API) dropResponse(c *gin.Context) {
	if a.fault(c) == FaultDropResponse {
		c.Writer = &dropWriter{ResponseWriter: c.Writer, c: c, a: a}
	}
}

// dropWriter closes the connection when an execution's answer is written.
// It tells an execution (a lease is held: the handler ran) from a replay, a
// 409 or a refusal, which are written as usual.
type dropWriter struct {
	gin.ResponseWriter
	c       *gin.Context
	a       *API
	dropped bool
}

// drop reports whether the answer is to be dropped, closing the connection
// the first time.
func (w *dropWriter) drop() bool {
	if w.dropped {
		return true
	}
	if ginmw.Attempt(w.c) == 0 { // not protected: no execution
		return false
	}
	w.dropped = true
	conn, _, err := w.ResponseWriter.Hijack()
	if err != nil {
		// Without the connection the best we can do is abort the handler,
		// which net/http turns into a dropped connection too.
		w.a.cfg.Logger.Warn("payments: drop-response: hijack failed; aborting", "err", err)
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
	w.a.cfg.Logger.Info("payments: drop-response drill: outcome stored, connection closed without an answer", "key", ginmw.Key(w.c))
	return true
}

func (w *dropWriter) WriteHeader(code int) {
	if code < 200 || !w.drop() {
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *dropWriter) WriteHeaderNow() {
	if !w.drop() {
		w.ResponseWriter.WriteHeaderNow()
	}
}

func (w *dropWriter) Write(p []byte) (int, error) {
	if w.drop() {
		return 0, http.ErrHijacked
	}
	return w.ResponseWriter.Write(p)
}

func (w *dropWriter) WriteString(s string) (int, error) {
	if w.drop() {
		return 0, http.ErrHijacked
	}
	return w.ResponseWriter.WriteString(s)
}

func (w *dropWriter) Flush() {
	if !w.drop() {
		w.ResponseWriter.Flush()
	}
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *dropWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
