// Package devredis opens the Redis an example runs on: the URL it was given,
// or else an embedded in-memory miniredis, so that every example runs with
// "go run" and nothing installed, and none connects to a Redis it was not
// pointed at.
package devredis

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Open returns a client for url (a redis:// or rediss:// URL), or, when url
// is empty, for a miniredis started on a free loopback port. It pings the
// server, so a wrong URL fails here rather than on the first request. The
// client has ContextTimeoutEnabled, so the store's and the middleware's
// deadlines bound every call. where describes the server for a log line,
// without credentials;
// closeAll closes the client and stops the embedded server.
func Open(url string) (client *redis.Client, where string, closeAll func(), err error) {
	stop := func() {}
	if url == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.StartAddr("127.0.0.1:0"); err != nil {
			return nil, "", nil, fmt.Errorf("embedded redis: %w", err)
		}
		url, stop = "redis://"+mr.Addr(), mr.Close
		where = "embedded miniredis at " + url + " (in memory, gone on exit; -redis URL for your own)"
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		stop()
		return nil, "", nil, fmt.Errorf("redis URL: %w", err)
	}
	if where == "" {
		where = fmt.Sprintf("redis at %s db %d", opts.Addr, opts.DB) // no credentials in logs
	}
	opts.ContextTimeoutEnabled = true
	c := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		stop()
		return nil, "", nil, fmt.Errorf("redis at %s: %w", opts.Addr, err)
	}
	return c, where, func() { _ = c.Close(); stop() }, nil
}
