package idemkeytest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
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

// checkoutApp is gin.Default() (Logger and Recovery) with a checkout that
// charges once, checkpoints the charge and, on X-Crash, crashes after it:
// by runtime.Goexit (goexit), else by a panic with http.ErrAbortHandler.
// A retry resumes from the checkpoint without charging again.
func checkoutApp(store *redisstore.Store, charges *counterT, goexit bool) *gin.Engine {
	gin.SetMode(gin.TestMode)
	gin.DefaultWriter, gin.DefaultErrorWriter = io.Discard, io.Discard
	r := gin.Default()
	r.POST("/v1/checkout", ginmw.New(store, ginmw.Options{Scope: func(c *gin.Context) (string, error) { return callerOf(c.Request) }}),
		func(c *gin.Context) {
			point, data := ginmw.RecoveryPoint(c)
			id := string(data)
			if point != "charged" {
				id = fmt.Sprint(charges.add())
				if err := ginmw.Checkpoint(c, "charged", []byte(id)); err != nil {
					c.Status(http.StatusServiceUnavailable)
					return
				}
			}
			if c.GetHeader("X-Crash") != "" {
				if goexit {
					runtime.Goexit()
				}
				panic(http.ErrAbortHandler)
			}
			c.JSON(http.StatusCreated, gin.H{"charge": id})
		})
	return r
}

// On gin.Default(), a crash by runtime.Goexit gets no answer and its retry
// resumes: the crash check passes. A panic with http.ErrAbortHandler is
// recovered by gin.Recovery, which answers an empty 200: the check fails,
// naming gin.Recovery and runtime.Goexit rather than doubting Config.Crash.
func TestRunCrashResumeOnGinDefault(t *testing.T) {
	for _, tc := range []struct {
		name   string
		goexit bool
		says   string // "" for a pass
	}{
		{"runtime.Goexit", true, ""},
		{"panic with http.ErrAbortHandler", false, "not so: the first attempt, crashed by Config.Crash, gets no answer: it was answered: 200 (0 bytes); " +
			"an empty 200 is what gin.Recovery (which gin.Default() mounts) answers for a handler that panics with http.ErrAbortHandler: " +
			"crash with runtime.Goexit() instead"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, rdb := NewStore(t, redisstore.Options{})
			var charges counterT
			r := record(t, checkoutApp(store, &charges, tc.goexit), Config{Path: "/v1/checkout", Body: []byte(`{"amount":1200}`),
				Header: alice, OtherHeader: bob, SameCallerHeader: aliceRefreshed, SideEffects: charges.Count, Redis: rdb,
				Crash: func(r *http.Request) { r.Header.Set("X-Crash", "1") }})
			res := r.results()
			if tc.says == "" {
				if r.failed || res["crash-resume"] != "ok" {
					t.Fatalf("want every check to pass:\n%s", r)
				}
				return
			}
			if res["crash-resume"] != "fail" || !strings.Contains(r.message("crash-resume"), tc.says) {
				t.Fatalf("want crash-resume to fail with %q:\n%s", tc.says, r)
			}
		})
	}
}

// paymentsApp is a Gin app that counts payments made: a declined card
// (amount over 1000) is a 402 outcome, stored and replayed, with no
// payment. Each payment also sends a receipt, counted with it by both.
func paymentsApp(store *redisstore.Store, payments, both *counterT) *gin.Engine {
	gin.SetMode(gin.TestMode)
	r := gin.New()
	r.POST("/v1/payments", ginmw.New(store, ginmw.Options{ErrorHandler: renderErrors}), func(c *gin.Context) {
		var in struct {
			Amount int `json:"amount"`
		}
		if err := c.ShouldBindJSON(&in); err != nil {
			_ = c.Error(err)
			return
		}
		if in.Amount > 1000 {
			_ = c.Error(errDeclined)
			return
		}
		n := payments.add()
		both.add() // the payment
		both.add() // its receipt
		c.JSON(http.StatusCreated, gin.H{"payment": n})
	})
	return r
}

// Config.SideEffectsPerRun: a declined card makes no payment, which the
// kit can test with new(0); a counter of two things per run with new(2).
// Without it the kit wants one per run, and says what it saw.
func TestRunSideEffectsPerRun(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   string
		both   bool // count payments and receipts together
		perRun *int
		says   string // "" for a pass
	}{
		{"a declined card makes none", `{"amount":5000}`, false, new(0), ""},
		{"a payment and its receipt", `{"amount":500}`, true, new(2), ""},
		{"a declined card, one wanted", `{"amount":5000}`, false, nil, "not so: exactly one side effect: SideEffects +0"},
		{"a payment and its receipt, one wanted", `{"amount":500}`, true, nil, "not so: exactly one side effect: SideEffects +2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, rdb := NewStore(t, redisstore.Options{})
			var payments, both counterT
			count := payments.Count
			if tc.both {
				count = both.Count
			}
			r := record(t, paymentsApp(store, &payments, &both), Config{Path: "/v1/payments", Body: []byte(tc.body),
				Header: alice, OtherHeader: bob, SideEffects: count, SideEffectsPerRun: tc.perRun, Redis: rdb})
			if tc.says == "" {
				if r.failed {
					t.Fatalf("want every check to pass:\n%s", r)
				}
				return
			}
			if r.results()["concurrency"] != "fail" || !strings.Contains(r.message("concurrency"), tc.says) {
				t.Fatalf("want concurrency to fail with %q:\n%s", tc.says, r)
			}
		})
	}
}
