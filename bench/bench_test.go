package bench

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

// Run with: go -C bench test . -bench . -run '^$' [-benchtime 2s] [-cpuprofile cpu.out -memprofile mem.out]
//
// BenchmarkStore times the store's operations, one at a time, so ns/op is a
// round trip's latency plus our Go work. BenchmarkGin serves the contenders
// of the scenario runner through httptest, without the network between
// client and server, so the difference between the floor or the limit and
// ours is our Go work per request.

// backend opens a client on a private redis-server or on miniredis.
func backend(b *testing.B, name string) *redis.Client {
	b.Helper()
	var addr string
	switch name {
	case "redis":
		addr = redistest.Start(b).Addr()
	case "miniredis":
		addr = miniredis.RunT(b).Addr()
	}
	c := newRedisClient(addr)
	b.Cleanup(func() { _ = c.Close() })
	return c
}

var backends = []string{"redis", "miniredis"}

// unique returns a key prefix no earlier benchmark run used (-count, or
// b.Run calling a function again).
func unique(b *testing.B) string {
	return b.Name() + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
}

func BenchmarkStore(b *testing.B) {
	for _, be := range backends {
		b.Run(be, func(b *testing.B) {
			client := backend(b, be)
			s, err := redisstore.New(client, redisstore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			req := func(prefix string, i int) redisstore.Request {
				return redisstore.Request{Scope: "acct", Key: prefix + strconv.Itoa(i), Fingerprint: "fp", Label: "POST /v1/payments"}
			}
			resp := redisstore.Response{Code: 201, Body: bytes.Repeat([]byte("x"), 100)}
			claimComplete := func(b *testing.B, r redisstore.Request) {
				c, err := s.Claim(ctx, r)
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Lease.Complete(ctx, resp); err != nil {
					b.Fatal(err)
				}
			}
			claimComplete(b, req("warm", 0)) // script cache

			b.Run("claim+complete", func(b *testing.B) {
				prefix := unique(b)
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					claimComplete(b, req(prefix, i))
				}
			})
			b.Run("replay", func(b *testing.B) {
				done := req(unique(b), 0)
				claimComplete(b, done)
				b.ReportAllocs()
				for b.Loop() {
					c, err := s.Claim(ctx, done)
					if err != nil || c.Status != redisstore.Replayed {
						b.Fatal(c, err)
					}
				}
			})
			b.Run("in-progress", func(b *testing.B) {
				busy := req(unique(b), 0)
				if _, err := s.Claim(ctx, busy); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := s.Claim(ctx, busy); err == nil {
						b.Fatal("claimed a key in progress")
					}
				}
			})
			b.Run("mismatch", func(b *testing.B) {
				done := req(unique(b), 0)
				claimComplete(b, done)
				other := done
				other.Fingerprint = "other"
				b.ReportAllocs()
				for b.Loop() {
					if _, err := s.Claim(ctx, other); err == nil {
						b.Fatal("claimed a key with another fingerprint")
					}
				}
			})
			fn := func(context.Context, *redisstore.Lease) ([]byte, error) { return resp.Body, nil }
			b.Run("Do", func(b *testing.B) {
				prefix := unique(b)
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if _, err := s.Do(ctx, req(prefix, i), fn); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("Do-replay", func(b *testing.B) {
				r := req(unique(b), 0)
				if _, err := s.Do(ctx, r, fn); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if res, err := s.Do(ctx, r, fn); err != nil || !res.Replayed {
						b.Fatal(res, err)
					}
				}
			})
		})
	}
}

// BenchmarkGin serves every contender that is not pipelined (one request
// at a time gives a pipeliner nothing to batch), through httptest, each with
// its own client on the backend.
func BenchmarkGin(b *testing.B) {
	for _, be := range backends {
		b.Run(be, func(b *testing.B) {
			ctx := context.Background()
			a := &app{}
			for _, sp := range contenders {
				if sp.pipelined {
					continue
				}
				client := backend(b, be)
				h, _, err := sp.handler(ctx, a, client)
				if err != nil {
					b.Fatal(err)
				}
				if err := serveOnce(h, unique(b)+sp.name, http.StatusCreated); err != nil {
					b.Fatal(err)
				}
				b.Run(sp.name+"/first", func(b *testing.B) {
					prefix := unique(b)
					b.ReportAllocs()
					for i := 0; b.Loop(); i++ {
						if err := serveOnce(h, prefix+strconv.Itoa(i), http.StatusCreated); err != nil {
							b.Fatal(err)
						}
					}
				})
				if sp.kind == kindBare {
					continue
				}
				b.Run(sp.name+"/replay", func(b *testing.B) {
					key := unique(b)
					if err := serveOnce(h, key, http.StatusCreated); err != nil {
						b.Fatal(err)
					}
					b.ReportAllocs()
					for b.Loop() {
						if err := serveOnce(h, key, http.StatusCreated); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}
