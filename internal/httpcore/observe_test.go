package httpcore_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/redisstore"
)

// routes is an Observer that keeps the routes of the events that end a
// request.
type routes struct {
	mu   sync.Mutex
	seen map[string]int
}

func (r *routes) Event(_ context.Context, e *observe.Event) {
	if e.Kind == observe.Completed {
		r.mu.Lock()
		r.seen[e.Route]++
		r.mu.Unlock()
	}
}

func (*routes) Redis(context.Context, *observe.Call) {}

// Regression: where no route pattern was known, the route of
// an event was the request's path, chosen by the client: any bytes (POST
// /%FF is not valid UTF-8) and a series per path in the metrics. Now it is
// the pattern, or the method and "unmatched". (Gin: ginmw's
// TestRoutesAreBounded.)
func TestRoutesAreBounded(t *testing.T) {
	paths := []string{"/v1/items/1", "/v1/items/2", "/%FF", "/orders/1", "/orders/2", "/" + strings.Repeat("x", 300)}
	post := func(t *testing.T, base string) {
		for i, path := range paths {
			req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader("{}"))
			require.NoError(t, err)
			req.Header.Set("Idempotency-Key", fmt.Sprint("k", i))
			req.Header.Set("Authorization", "Bearer sk_test")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err, path)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusCreated, resp.StatusCode, path)
		}
	}
	newStore := func(t *testing.T) (*redisstore.Store, *routes) {
		rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		obs := &routes{seen: map[string]int{}}
		store, err := redisstore.New(rdb, redisstore.Options{Observer: obs})
		require.NoError(t, err)
		return store, obs
	}
	created := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }

	t.Run("net/http, mounted on each route", func(t *testing.T) {
		store, obs := newStore(t)
		mw := httpmw.New(store, httpmw.Options{})
		mux := http.NewServeMux()
		mux.Handle("POST /v1/items/{id}", mw(http.HandlerFunc(created)))
		mux.Handle("example.com/orders/", mw(http.HandlerFunc(created))) // a host, no method
		mux.Handle("/", mw(http.HandlerFunc(created)))
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/orders/") {
				r.Host = "example.com"
			}
			mux.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		post(t, srv.URL)
		require.Equal(t, map[string]int{"POST /v1/items/{id}": 2, "POST example.com/orders/": 2, "POST /": 2}, obs.seen)
	})
	t.Run("net/http, around the mux", func(t *testing.T) {
		store, obs := newStore(t)
		mux := http.NewServeMux()
		mux.HandleFunc("POST /v1/items/{id}", created)
		mux.HandleFunc("/", created)
		srv := httptest.NewServer(httpmw.New(store, httpmw.Options{})(mux)) // no pattern yet when the middleware runs
		t.Cleanup(srv.Close)
		post(t, srv.URL)
		require.Equal(t, map[string]int{"POST unmatched": 6}, obs.seen)
	})
}
