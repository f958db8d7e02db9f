package spec

import (
	"context"
	"math"
	"strconv"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

// TestStoreReplaysEveryCodeItStores: whatever code a caller completes
// with (Response.Code is any int), the record the store writes replays it,
// and Lookup reads it. A negative code used to be written and then refused
// on every claim (ErrUnexpectedReply) until the record expired.
func TestStoreReplaysEveryCodeItStores(t *testing.T) {
	mr := miniredis.RunT(t)
	backends := map[string]func(t *testing.T) *redis.Client{
		"miniredis": func(t *testing.T) *redis.Client {
			c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
		"redis": func(t *testing.T) *redis.Client { return redistest.Start(t).Client(t) },
	}
	for name, client := range backends {
		t.Run(name, func(t *testing.T) {
			store, err := redisstore.New(client(t), redisstore.Options{NoCollapse: true})
			require.NoError(t, err)
			ctx := context.Background()
			for _, code := range []int{-3, math.MinInt64, math.MaxInt64, 0, 201} {
				req := redisstore.Request{Scope: "s", Key: "key " + strconv.Itoa(code)}
				c, err := store.Claim(ctx, req)
				require.NoError(t, err)
				require.NoError(t, c.Lease.Complete(ctx, redisstore.Response{Code: code, Body: []byte("out")}))
				again, err := store.Claim(ctx, req)
				require.NoError(t, err, "code %d", code)
				require.Equal(t, redisstore.Replayed, again.Status)
				require.Equal(t, redisstore.Response{Code: code, Body: []byte("out")}, again.Response)
				rec, err := store.Lookup(ctx, req.Scope, req.Key)
				require.NoError(t, err)
				require.Equal(t, code, rec.Response.Code)
			}
		})
	}
}
