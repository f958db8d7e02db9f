package readmetest

import (
	"context"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/ginmw"
	"github.com/idemkey/idemkey/redisstore"
)

// README:begin gin
// renderErrors is the app's error middleware: handlers call c.Error and return.
func renderErrors(c *gin.Context) {
	c.Next()
	if err := c.Errors.Last(); err != nil && !c.Writer.Written() {
		c.JSON(statusOf(err), gin.H{"error": err.Error()}) // a 4xx is stored, a 5xx releases the key
	}
}

func ginQuickStart(stopping context.Context, r *gin.Engine) {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	// Lease 10s, retention 24h; on a Redis that may evict, refuse (503).
	store, err := redisstore.New(rdb, redisstore.Options{RequireNoEviction: true})
	if err != nil {
		log.Fatal(err)
	}
	r.Use(renderErrors)
	idem := ginmw.New(store, ginmw.Options{
		Scope:        userID,          // the caller your auth middleware (mounted first) set; an error answers 401
		ErrorHandler: renderErrors,    // renders c.Errors inside the run: what it writes is stored
		Shutdown:     stopping,        // cancelled on SIGTERM: running requests get ShutdownGrace to finish
		Wait:         5 * time.Second, // a duplicate gets the replay, not 409 + Retry-After: 1; it holds a connection meanwhile
	})
	r.POST("/v1/payments", idem, func(c *gin.Context) {
		// The context ends on a lost lease, MaxDuration or a graceful stop, never
		// when the client gives up; the derived key is the provider's key.
		ch, err := provider.Charge(c.Request.Context(), 1200, ginmw.DerivedKey(c, "charge"))
		if err != nil {
			_ = c.Error(err)
			return
		}
		c.Header("Location", "/v1/payments/"+ch.ID)
		c.JSON(http.StatusCreated, ch) // stored, then sent; retries get it replayed
	})
}

// README:end
