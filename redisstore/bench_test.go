package redisstore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

// The store's hot paths on a private redis-server, serially (one call in
// flight: the store's own cost, not the machine's parallelism), on a client
// that ends calls at their deadline ("bounded") and on one the store bounds
// on another goroutine ("goroutine": the auto-pipeliner). Allocations per
// op are the figure to compare across a change; wall time is the machine's.
//
//	go test -run '^$' -bench . -benchmem ./redisstore/
func BenchmarkStore(b *testing.B) {
	srv := redistest.Start(b)
	clients := []struct {
		name   string
		client redis.Scripter
	}{{"bounded", srv.Client(b)}, {"goroutine", redistest.AutoPipeliner(b, srv.Client(b))}}
	ctx := context.Background()
	for _, c := range clients {
		s, err := New(c.client, Options{Prefix: "bench-" + c.name + ":"})
		require.NoError(b, err)
		warm, err := s.Claim(ctx, Request{Key: "warm-up"}) // load the scripts
		require.NoError(b, err)
		require.NoError(b, warm.Lease.Complete(ctx, Response{Code: 200, Body: []byte("ok")}))
		var seq atomic.Int64
		b.Run(c.name+"/first", func(b *testing.B) {
			for b.Loop() {
				cl, err := s.Claim(ctx, Request{Scope: "acct", Key: "k" + strconv.FormatInt(seq.Add(1), 10), Fingerprint: "f", Label: "POST /x"})
				if err != nil {
					b.Fatal(err)
				}
				if err := cl.Lease.Complete(ctx, Response{Code: 201, Body: []byte(`{"id":"pay_1"}`)}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/replay", func(b *testing.B) {
			for b.Loop() {
				cl, err := s.Claim(ctx, Request{Key: "warm-up"})
				if err != nil || cl.Status != Replayed {
					b.Fatal(cl, err)
				}
			}
		})
	}
}
