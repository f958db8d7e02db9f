package main

import (
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/idemkeytest"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

// The verification list, in process, with the shop's real order count.
func TestIdempotencyKit(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) (*redisstore.Store, redis.UniversalClient){
		"miniredis": func(t *testing.T) (*redisstore.Store, redis.UniversalClient) {
			return idemkeytest.NewStore(t, redisstore.Options{})
		},
		"redis-server": func(t *testing.T) (*redisstore.Store, redis.UniversalClient) {
			rdb := redistest.Start(t).Client(t)
			store, err := redisstore.New(rdb, redisstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return store, rdb
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store, rdb := open(t)
			s := newShop(newWarehouse(0))
			idemkeytest.Run(t, newAPI(store, s), idemkeytest.Config{
				Path:        "/v1/orders",
				Body:        []byte(`{"sku":"book","qty":1}`),
				Header:      http.Header{"Authorization": {"Bearer sk_test_alice"}},
				OtherHeader: http.Header{"Authorization": {"Bearer sk_test_bob"}},
				SideEffects: s.orderCount,
				Redis:       rdb,
			})
			// concurrency, the fingerprint probes' own key, lost-response,
			// scope (bob's); each shipped once.
			if n, shipped := s.orderCount(), len(s.warehouse.shipments); n != 4 || shipped != 4 {
				t.Errorf("%d orders, %d shipments, want 4 of each", n, shipped)
			}
		})
	}
}
