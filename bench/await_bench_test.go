package bench

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/redisstore"
)

// noSubscribe hides a client's pub/sub, so that Await can only poll.
type noSubscribe struct{ redis.Scripter }

// BenchmarkAwait measures how long after the owner's completion a waiter in
// another process (another Store on its own client) gets the replay, on a
// private redis-server: with pub/sub wake-ups, and polling only. It reports
// the wait's p50 and p99 (wake-p50-ms, wake-p99-ms); ns/op also counts the
// 30ms each waiter is given to settle into its wait. This figure was a
// timed test (TestAwaitLatency) until the rule that no wall-clock bound
// decides a test (docs/testing.md).
//
//	go -C bench test -run '^$' -bench Await -benchtime 60x .
func BenchmarkAwait(b *testing.B) {
	client := backend(b, "redis")
	ctx := context.Background()
	for _, mode := range []string{"pubsub", "polling"} {
		b.Run(mode, func(b *testing.B) {
			owner, err := redisstore.New(client, redisstore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			other := newRedisClient(client.Options().Addr)
			b.Cleanup(func() { _ = other.Close() })
			var waiterClient redis.Scripter = other
			if mode == "polling" {
				waiterClient = noSubscribe{other}
			}
			waiter, err := redisstore.New(waiterClient, redisstore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			prefix := unique(b)
			lat := make([]time.Duration, 0, b.N)
			for i := 0; b.Loop(); i++ {
				req := redisstore.Request{Scope: "acct", Key: prefix + strconv.Itoa(i), Fingerprint: "fp", Label: "POST /v1/payments"}
				c, err := owner.Claim(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				got := make(chan time.Time, 1)
				go func() {
					if r, err := waiter.Await(ctx, req); err == nil && r.Status == redisstore.Replayed {
						got <- time.Now()
					}
					close(got)
				}()
				time.Sleep(30 * time.Millisecond) // the waiter settles into its wait
				done := time.Now()
				if err := c.Lease.Complete(ctx, redisstore.Response{Code: 200}); err != nil {
					b.Fatal(err)
				}
				at, ok := <-got
				if !ok {
					b.Fatal("the waiter did not get the replay")
				}
				lat = append(lat, at.Sub(done))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2])/1e6, "wake-p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "wake-p99-ms")
		})
	}
}
