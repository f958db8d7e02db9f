package faultproxy_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/internal/faultproxy"
)

// The proxy loses the reply to the first INCR: the server has counted, the
// client reads EOF and sends INCR again, as go-redis does by default, and
// gets the second count. A test of a Lua script sees the same, and learns
// whether running it twice is harmless.
func Example() {
	srv, err := miniredis.Run() // or a real redis-server from internal/redistest
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		panic(err)
	}
	defer p.Close()
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer c.Close()

	lost := p.Inject(faultproxy.Fault{Action: faultproxy.LoseReply, Match: faultproxy.Name("INCR"), Times: 1})
	n, err := c.Incr(context.Background(), "counter").Result()
	fmt.Println(n, err, lost.Hits())
	// Output: 2 <nil> 1
}

// Faults target commands by name and arguments, and by count: here the
// third GET of key "a" is held for 50 ms; the others pass untouched.
func ExampleFault() {
	srv, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		panic(err)
	}
	defer p.Close()
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer c.Close()
	ctx := context.Background()

	slow := p.Inject(faultproxy.Fault{
		Action: faultproxy.Delay,
		Delay:  50 * time.Millisecond,
		Match:  faultproxy.Prefix("GET", "a"),
		Skip:   2,
		Times:  1,
	})
	for i := 1; i <= 4; i++ {
		start := time.Now()
		_ = c.Get(ctx, "a").Err()
		took := time.Since(start)
		fmt.Println(i, slow.Hits(), slow.Hits() == 1 && i == 3 && took >= 50*time.Millisecond)
	}
	// Output:
	// 1 0 false
	// 2 0 false
	// 3 1 true
	// 4 1 false
}
