package main

import (
	"errors"
	"fmt"
	"maps"
	neturl "net/url"
	"path"
	"slices"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"
)

// openRedis returns a client for url, or for an embedded miniredis on a
// free loopback port when url is empty; where describes it without
// credentials, and no error quotes the URL (its password).
func openRedis(url string) (rdb *redis.Client, where string, closeAll func(), err error) {
	stop := func() {}
	if url == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.StartAddr("127.0.0.1:0"); err != nil {
			return nil, "", nil, fmt.Errorf("embedded redis: %w", err)
		}
		if err := answerConfig(mr); err != nil {
			mr.Close()
			return nil, "", nil, err
		}
		url, stop = "redis://"+mr.Addr(), mr.Close
		where = "embedded miniredis (in memory; -redis URL for your own)"
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		stop()
		var ue *neturl.Error
		if errors.As(err, &ue) {
			// url.Parse's error quotes the whole URL; a bad %-escape's
			// reason quotes a piece of it.
			err = errors.New("it does not parse (write '%' as %25, '@' as %40 and '/' as %2F in the user and password)")
		}
		return nil, "", nil, fmt.Errorf("redis URL: %w", err)
	}
	if where == "" {
		where = fmt.Sprintf("redis at %s db %d", opts.Addr, opts.DB)
	}
	opts.ContextTimeoutEnabled = true
	rdb = redis.NewClient(opts)
	return rdb, where, func() { _ = rdb.Close(); stop() }, nil
}

// answerConfig makes the embedded miniredis answer CONFIG GET for its
// eviction settings, which miniredis does not implement, so that the
// store's start-up check finds what is true of it (it never evicts)
// instead of warning that it cannot tell. Other CONFIG commands get an
// error.
func answerConfig(mr *miniredis.Miniredis) error {
	config := map[string]string{"maxmemory": "0", "maxmemory-policy": "noeviction"}
	err := mr.Server().Register("CONFIG", func(c *server.Peer, _ string, args []string) {
		if len(args) < 2 || !strings.EqualFold(args[0], "GET") {
			c.WriteError("ERR the embedded miniredis answers only CONFIG GET")
			return
		}
		found := map[string]string{}
		for _, pattern := range args[1:] {
			for name, v := range config {
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
