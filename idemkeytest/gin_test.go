package idemkeytest

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemkey/idemkey/ginmw"
	"github.com/idemkey/idemkey/redisstore"
)

var errDeclined = errors.New("card declined")

// renderErrors is a Gin app's error middleware: it renders c.Errors.
func renderErrors(c *gin.Context) {
	if len(c.Errors) == 0 || c.Writer.Written() {
		return
	}
	if errors.Is(c.Errors.Last().Err, errDeclined) {
		c.JSON(http.StatusPaymentRequired, gin.H{"error": "card declined"})
		return
	}
	c.JSON(http.StatusBadRequest, gin.H{"error": c.Errors.Last().Error()})
}

// chargeApp is a Gin app whose handler reports a declined card with
// c.Error, leaving the answer to its error middleware; every charge it
// attempts is a side effect.
func chargeApp(store *redisstore.Store, opts ginmw.Options, attempts *counterT) *gin.Engine {
	gin.SetMode(gin.TestMode)
	r := gin.New()
	// The error middleware for every route, the c.Next-then-render style:
	// on a protected route it finds the response written, with ErrorHandler.
	r.Use(func(c *gin.Context) { c.Next(); renderErrors(c) })
	r.POST("/v1/charges", ginmw.New(store, opts), func(c *gin.Context) {
		var in struct {
			Amount int `json:"amount"`
		}
		if err := c.ShouldBindJSON(&in); err != nil {
			_ = c.Error(err)
			return
		}
		n := attempts.add()
		if in.Amount > 1000 {
			_ = c.Error(errDeclined) // a deterministic outcome, stored and replayed
			return
		}
		c.Header("Location", fmt.Sprintf("/v1/charges/%d", n))
		c.JSON(http.StatusCreated, gin.H{"id": n})
	})
	return r
}

// The kit passes a Gin app that renders errors in its error middleware
// when ginmw.Options.ErrorHandler names it: a declined card (402) is an
// outcome, stored and replayed, with one charge attempt.
func TestRunOnGinWithErrorHandler(t *testing.T) {
	for _, body := range []string{`{"amount":500}`, `{"amount":5000}`} {
		t.Run(body, func(t *testing.T) {
			store, rdb := NewStore(t, redisstore.Options{})
			var attempts counterT
			app := chargeApp(store, ginmw.Options{ErrorHandler: renderErrors}, &attempts)
			Run(t, app, Config{Path: "/v1/charges", Body: []byte(body), Header: alice, OtherHeader: bob,
				SideEffects: attempts.Count, Redis: rdb})
		})
	}
}

// Without ErrorHandler the declined charge is no answer to the middleware:
// the key is released and every retry charges again, which the kit finds.
func TestRunFailsGinWithoutErrorHandler(t *testing.T) {
	store, _ := NewStore(t, redisstore.Options{})
	var attempts counterT
	app := chargeApp(store, ginmw.Options{}, &attempts)
	r := record(t, app, Config{Path: "/v1/charges", Body: []byte(`{"amount":5000}`), Header: alice,
		SideEffects: attempts.Count, Parallel: 5, Timeout: 3 * time.Second})
	msg := r.message("concurrency")
	if r.results()["concurrency"] != "fail" || !strings.Contains(msg, "not so: exactly one original: ") || !strings.Contains(msg, "not so: exactly one side effect: SideEffects +") {
		t.Fatalf("want concurrency to fail:\n%s", r)
	}
}

// counterT counts charge attempts.
type counterT struct {
	mu sync.Mutex
	n  int
}

func (c *counterT) add() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n
}

func (c *counterT) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
