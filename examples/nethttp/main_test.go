package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

// apiEnv is the API on a loopback test server.
type apiEnv struct {
	shop  *shop
	redis *redis.Client
	base  string
}

func (e *apiEnv) post(t *testing.T, apiKey, idemKey, body string) reply {
	t.Helper()
	r, err := call(context.Background(), http.MethodPost, e.base+"/v1/orders", apiKey, idemKey, body)
	require.NoError(t, err)
	return r
}

func (e *apiEnv) keysInRedis(t *testing.T) int64 {
	n, err := e.redis.DBSize(context.Background()).Result()
	require.NoError(t, err)
	return n
}

func (s *shop) orderCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.orders)
}

// eachRedis runs f with the API on miniredis and on a private redis-server.
func eachRedis(t *testing.T, f func(t *testing.T, e *apiEnv)) {
	backends := map[string]func(t *testing.T) *redis.Client{
		"miniredis": func(t *testing.T) *redis.Client {
			c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
		"redis-server": func(t *testing.T) *redis.Client { return redistest.Start(t).Client(t) },
	}
	for name, client := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := &apiEnv{shop: newShop(newWarehouse(30 * time.Millisecond)), redis: client(t)}
			store, err := redisstore.New(e.redis, redisstore.Options{})
			require.NoError(t, err)
			srv := httptest.NewServer(newAPI(store, e.shop))
			t.Cleanup(srv.Close)
			e.base = srv.URL
			f(t, e)
		})
	}
}

func TestSelftest(t *testing.T) {
	eachRedis(t, func(t *testing.T, e *apiEnv) {
		var out strings.Builder
		require.NoError(t, selftest(context.Background(), e.base, e.shop.warehouse, &out), out.String())
		require.Contains(t, out.String(), "ok: every order created and shipped once")
	})
}

func TestRetryReplaysStatusLocationAndBody(t *testing.T) {
	eachRedis(t, func(t *testing.T, e *apiEnv) {
		first := e.post(t, "sk_test_alice", "k1", `{"sku":"book","qty":1}`)
		require.Equal(t, http.StatusCreated, first.Status)
		require.False(t, first.Replayed)
		for range 3 {
			r := e.post(t, "sk_test_alice", "k1", `{"qty":1,"sku":"book"}`)
			require.Equal(t, reply{http.StatusCreated, true, first.Location, "", first.Body}, r)
		}
		calls, _ := e.shop.warehouse.counts()
		require.Equal(t, 1, calls)
	})
}

func TestConcurrentDuplicatesCreateOneOrder(t *testing.T) {
	eachRedis(t, func(t *testing.T, e *apiEnv) {
		const n = 10
		replies, errs := make([]reply, n), make([]error, n)
		var wg sync.WaitGroup
		for i := range replies {
			wg.Go(func() {
				replies[i], errs[i] = call(context.Background(), http.MethodPost, e.base+"/v1/orders", "sk_test_alice", "k1", `{"sku":"pen","qty":3}`)
			})
		}
		wg.Wait()
		created := 0
		for i, r := range replies {
			require.NoError(t, errs[i])
			switch {
			case r.Status == http.StatusCreated && !r.Replayed:
				created++
			case r.Status == http.StatusConflict:
				require.Equal(t, "1", r.RetryAfter)
			default:
				require.Equal(t, http.StatusCreated, r.Status, "a replay")
			}
		}
		require.Equal(t, 1, created)
		calls, shipments := e.shop.warehouse.counts()
		require.Equal(t, 1, calls)
		require.Equal(t, 1, shipments)
		require.Equal(t, 1, e.shop.orderCount())
	})
}

func TestKeyReusedForAnotherOrderIs422(t *testing.T) {
	eachRedis(t, func(t *testing.T, e *apiEnv) {
		require.Equal(t, http.StatusCreated, e.post(t, "sk_test_alice", "k1", `{"sku":"book","qty":1}`).Status)
		r := e.post(t, "sk_test_alice", "k1", `{"sku":"book","qty":2}`)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status)
		require.Equal(t, "problem: Idempotency key reused", r.Body)
		require.Equal(t, 1, e.shop.orderCount())
	})
}

func TestAccountsHaveTheirOwnKeysAndDerivedKeys(t *testing.T) {
	eachRedis(t, func(t *testing.T, e *apiEnv) {
		a := e.post(t, "sk_test_alice", "k1", `{"sku":"book","qty":1}`)
		b := e.post(t, "sk_test_bob", "k1", `{"sku":"book","qty":1}`)
		require.Equal(t, http.StatusCreated, b.Status)
		require.False(t, b.Replayed, "bob never sees alice's outcome")
		require.NotEqual(t, a.Body, b.Body)
		_, shipments := e.shop.warehouse.counts()
		require.Equal(t, 2, shipments, "the derived keys differ per account")

		r, err := call(context.Background(), http.MethodGet, e.base+a.Location, "sk_test_bob", "", "")
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, r.Status)
	})
}

func TestValidationErrorIsStoredAndReplayed(t *testing.T) {
	eachRedis(t, func(t *testing.T, e *apiEnv) {
		r := e.post(t, "sk_test_alice", "k1", `{"sku":"book","qty":0}`)
		require.Equal(t, http.StatusBadRequest, r.Status)
		require.False(t, r.Replayed)
		r = e.post(t, "sk_test_alice", "k1", `{"sku":"book","qty":0}`)
		require.Equal(t, http.StatusBadRequest, r.Status)
		require.True(t, r.Replayed)
	})
}

func TestUnprotectedAndUnauthenticatedRequestsLeaveRedisAlone(t *testing.T) {
	eachRedis(t, func(t *testing.T, e *apiEnv) {
		r := e.post(t, "sk_test_alice", "", `{"sku":"book","qty":1}`)
		require.Equal(t, http.StatusBadRequest, r.Status, "the key is required")
		r = e.post(t, "sk_wrong", "k1", `{"sku":"book","qty":1}`)
		require.Equal(t, http.StatusUnauthorized, r.Status)
		r, err := call(context.Background(), http.MethodGet, e.base+"/v1/orders/ord_1", "sk_test_alice", "", "")
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, r.Status)
		require.Zero(t, e.keysInRedis(t))

		created := e.post(t, "sk_test_alice", "k1", `{"sku":"book","qty":1}`)
		before := e.keysInRedis(t)
		r, err = call(context.Background(), http.MethodGet, e.base+created.Location, "sk_test_alice", "", "")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, r.Status, "GET needs no idempotency key")
		require.Equal(t, before, e.keysInRedis(t))
	})
}
