package ginmw_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/ginmw"
	"github.com/idemkey/idemkey/redisstore"
)

// A payments endpoint: the charge runs once however often the client
// retries, and every retry gets the first response back. An embedded
// miniredis stands in for Redis.
func ExampleNew() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	store, err := redisstore.New(rdb, redisstore.Options{})
	if err != nil {
		panic(err)
	}

	charges := 0
	r := gin.New()
	r.POST("/v1/payments", ginmw.New(store, ginmw.Options{}), func(c *gin.Context) {
		// Hand the provider a key of its own: unique per caller, key and step.
		_ = ginmw.DerivedKey(c, "charge")
		charges++
		c.Header("Location", "/v1/payments/pay_1")
		c.JSON(http.StatusCreated, gin.H{"id": "pay_1", "status": "succeeded"})
	})

	for range 3 {
		req := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":1200,"currency":"EUR"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk_test_alice")
		req.Header.Set("Idempotency-Key", "7f1c2a9e-order-42")
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Header().Get("Location"), w.Header().Get("Idempotent-Replayed"), w.Body.String())
	}
	fmt.Println("charges:", charges)
	// Output:
	// 201 /v1/payments/pay_1  {"id":"pay_1","status":"succeeded"}
	// 201 /v1/payments/pay_1 true {"id":"pay_1","status":"succeeded"}
	// 201 /v1/payments/pay_1 true {"id":"pay_1","status":"succeeded"}
	// charges: 1
}

// Gin's error pattern: the handler records the provider's decline with
// c.Error, and the app's error middleware renders it. As ErrorHandler it
// runs inside the protected run, so the 402 is the stored outcome and the
// retries do not charge again.
func ExampleOptions_errorHandler() {
	store, stop := exampleStore()
	defer stop()

	errDeclined := errors.New("card declined")
	renderErrors := func(c *gin.Context) {
		c.Next()
		if err := c.Errors.Last(); err != nil && !c.Writer.Written() {
			status := http.StatusServiceUnavailable
			if errors.Is(err, errDeclined) {
				status = http.StatusPaymentRequired
			}
			c.JSON(status, gin.H{"error": err.Error()})
		}
	}
	attempts := 0
	r := gin.New()
	r.Use(renderErrors) // for every route
	r.POST("/v1/payments", ginmw.New(store, ginmw.Options{ErrorHandler: renderErrors}), func(c *gin.Context) {
		attempts++ // the provider declines
		_ = c.Error(errDeclined)
	})

	for range 3 {
		req := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":1200}`))
		req.Header.Set("Authorization", "Bearer sk_test_alice")
		req.Header.Set("Idempotency-Key", "order-43")
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Header().Get("Idempotent-Replayed"), w.Body.String())
	}
	fmt.Println("charge attempts:", attempts)
	// Output:
	// 402  {"error":"card declined"}
	// 402 true {"error":"card declined"}
	// 402 true {"error":"card declined"}
	// charge attempts: 1
}

// exampleStore returns a store on an embedded miniredis, and what stops it.
func exampleStore() (*redisstore.Store, func()) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	store, err := redisstore.New(rdb, redisstore.Options{})
	if err != nil {
		panic(err)
	}
	return store, func() { _ = rdb.Close(); mr.Close() }
}
