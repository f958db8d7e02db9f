package readmetest

// README:begin gin
import (
	"context"
	"errors"
	"log"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/ginmw"
	"github.com/idemkey/idemkey/redisstore"
)

// renderErrors is the app's error middleware: handlers call c.Error and return.
func renderErrors(c *gin.Context) {
	c.Next()
	if err := c.Errors.Last(); err != nil && !c.Writer.Written() {
		status := http.StatusServiceUnavailable // 5xx: not stored, the key is released
		if errors.Is(err, errCardDeclined) {
			status = http.StatusPaymentRequired // 4xx: stored, replayed to every retry
		}
		c.JSON(status, gin.H{"error": err.Error()})
	}
}

func ginQuickStart(stopping context.Context, r *gin.Engine) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	store, err := redisstore.New(rdb, redisstore.Options{}) // prefix "idem:", lease 10s, retention 24h
	if err != nil {
		log.Fatal(err)
	}
	r.Use(renderErrors)
	idem := ginmw.New(store, ginmw.Options{
		// Keys belong to the caller your auth middleware (mounted before
		// this one) put in the context; an error (no caller) answers 401.
		Scope: func(c *gin.Context) (string, error) {
			if id := c.GetString("user_id"); id != "" {
				return id, nil
			}
			return "", errors.New("no authenticated user")
		},
		ErrorHandler: renderErrors, // renders c.Errors inside the run: what it writes is stored
		Shutdown:     stopping,     // cancelled on SIGTERM: running requests finish first
	})
	r.POST("/v1/payments", idem, func(c *gin.Context) {
		// c.Request.Context() ends on a lost lease, MaxDuration or the end of
		// a graceful stop, never when the client gives up. The derived key
		// is the provider's idempotency key.
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
