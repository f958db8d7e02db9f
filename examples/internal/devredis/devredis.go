// Package devredis opens the Redis an example runs on: the URL it was given,
// or else an embedded in-memory miniredis, so that every example runs with
// "go run" and nothing installed, and none connects to a Redis it was not
// pointed at.
package devredis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	neturl "net/url"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
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
		if err := AnswerConfig(mr); err != nil {
			mr.Close()
			return nil, "", nil, err
		}
		url, stop = "redis://"+mr.Addr(), mr.Close
		where = "embedded miniredis at " + url + " (in memory, gone on exit; -redis URL for your own)"
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		stop()
		return nil, "", nil, fmt.Errorf("redis URL: %w", withoutURL(err))
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

// URL returns the Redis URL an example was given: flagValue, or else
// $REDIS_URL. Read it after the flags are parsed, never as a flag's
// default: -h and every usage error print defaults, password included.
func URL(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	return os.Getenv("REDIS_URL")
}

// withoutURL drops the URL that url.Parse's errors quote whole (password
// included), keeping the reason. A bad %-escape's reason would show a piece
// of what it is in (the password, perhaps), so it is only named.
func withoutURL(err error) error {
	var ue *neturl.Error
	if !errors.As(err, &ue) {
		return err // go-redis's own: the scheme or the database number, no credentials
	}
	var esc neturl.EscapeError
	if errors.As(ue.Err, &esc) {
		return errors.New("a bad %-escape in the user, password or path (write '%' as %25)")
	}
	return ue.Err
}

// miniredisConfig is what the embedded miniredis says of itself to CONFIG
// GET: it never evicts (it has no memory limit), and it persists nothing
// (the store's start-up check warns about that, truly: the embedded Redis
// is gone on exit).
var miniredisConfig = map[string]string{"maxmemory": "0", "maxmemory-policy": "noeviction", "save": "", "appendonly": "no"}

// AnswerConfig makes mr answer CONFIG GET for its eviction settings, which
// miniredis does not implement: the store's start-up check
// (redisstore.Options.RequireNoEviction) would otherwise warn, on every
// example's first request, that it cannot read maxmemory-policy and
// persistence ("managed Redis?"). What it answers is true of miniredis,
// which never evicts and never persists. Other CONFIG commands get an
// error, as from a managed Redis that disables them.
func AnswerConfig(mr *miniredis.Miniredis) error {
	err := mr.Server().Register("CONFIG", func(c *server.Peer, cmd string, args []string) {
		if len(args) < 2 || !strings.EqualFold(args[0], "GET") {
			c.WriteError("ERR the embedded miniredis answers only CONFIG GET")
			return
		}
		found := map[string]string{}
		for _, pattern := range args[1:] {
			for name, v := range miniredisConfig {
				if ok, _ := path.Match(strings.ToLower(pattern), name); ok {
					found[name] = v
				}
			}
		}
		names := slices.Sorted(maps.Keys(found))
		c.WriteMapLen(len(names))
		for _, name := range names {
			c.WriteBulk(name)
			c.WriteBulk(found[name])
		}
	})
	if err != nil {
		return fmt.Errorf("embedded redis: %w", err)
	}
	return nil
}
