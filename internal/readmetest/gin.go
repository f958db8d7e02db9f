package readmetest

// README:begin gin
import (
	"errors"
	"log"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/ginmw"
	"github.com/idemkey/idemkey/redisstore"
)

func ginQuickStart(r *gin.Engine) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	// One auto-pipeliner per client, shared: concurrent requests' calls go
	// out in batches (docs/pipelining.md). rdb itself works too, unbatched.
	ap, err := rdb.AutoPipeline()
	if err != nil {
		log.Fatal(err)
	}
	// Prefix "idem:", lease 10s, retention 24h. The first claim checks
	// maxmemory-policy: on a Redis that evicts, refuse to serve (503).
	store, err := redisstore.New(ap, redisstore.Options{RequireNoEviction: true})
	if err != nil {
		log.Fatal(err)
	}
	idem := ginmw.New(store, ginmw.Options{
		// Keys belong to the caller your auth middleware put in the context;
		// an error (no caller) answers 401.
		Scope: func(c *gin.Context) (string, error) {
			if id := c.GetString("user_id"); id != "" {
				return id, nil
			}
			return "", errors.New("no authenticated user")
		},
	})
	r.POST("/v1/payments", idem, func(c *gin.Context) {
		// c.Request.Context() ends on a lost lease or MaxDuration, never when the
		// client gives up. The derived key is the provider's idempotency key.
		ch, err := provider.Charge(c.Request.Context(), 1200, ginmw.DerivedKey(c, "charge"))
		if err != nil {
			c.Status(http.StatusServiceUnavailable) // 5xx: not stored, the key is released
			return
		}
		c.Header("Location", "/v1/payments/"+ch.ID)
		c.JSON(http.StatusCreated, ch) // stored, then sent; retries get it replayed
	})
}

// README:end
