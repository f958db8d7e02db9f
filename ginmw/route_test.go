package ginmw_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/ginmw"
	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/redisstore"
)

// Regression: the middleware mounted with Use also runs for
// requests no route matches; their events carried the path (any bytes the
// client chose: POST /%FF is not valid UTF-8, and each path a series in the
// metrics). Now they carry Gin's FullPath, or "POST unmatched".
func TestRoutesAreBounded(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	var mu sync.Mutex
	seen := map[string]int{}
	store, err := redisstore.New(rdb, redisstore.Options{Observer: observe.Func{OnEvent: func(_ context.Context, e *observe.Event) {
		if e.Kind == observe.Completed {
			mu.Lock()
			seen[e.Route]++
			mu.Unlock()
		}
	}}})
	require.NoError(t, err)
	r := gin.New()
	r.Use(ginmw.New(store, ginmw.Options{Scope: ginmw.SharedScope("test")}))
	r.POST("/v1/items/:id", func(c *gin.Context) { c.Status(http.StatusCreated) })
	r.NoRoute(func(c *gin.Context) { c.Status(http.StatusCreated) })
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	for i, path := range []string{"/v1/items/1", "/v1/items/2", "/%FF", "/orders/1", "/" + strings.Repeat("x", 300)} {
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", fmt.Sprint("k", i))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err, path)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode, path)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{"POST /v1/items/:id": 2, "POST unmatched": 3}, seen)
}
