package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// redisEnv names the variable that gives the Redis URL when --redis is not set.
const redisEnv = "REDIS_URL"

// connect opens a client for a redis:// or rediss:// URL and checks that
// the server answers.
func connect(ctx context.Context, url string) (*redis.Client, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis URL: %w", err)
	}
	// Without it go-redis ignores context deadlines, and a hung Redis would
	// hold every request for its ReadTimeout.
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opts)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis at %s: %w", opts.Addr, err)
	}
	return rdb, nil
}

// redisName describes the server a client talks to, without credentials.
func redisName(rdb *redis.Client) string {
	o := rdb.Options()
	return fmt.Sprintf("%s db %d", o.Addr, o.DB)
}

// embedded starts an in-memory miniredis on a free loopback port.
func embedded() (*miniredis.Miniredis, *redis.Client, error) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		return nil, nil, fmt.Errorf("embedded redis: %w", err)
	}
	return mr, redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true}), nil
}

// newFlagSet returns a flag set that reports errors to stderr and prints
// usage, a one-line synopsis and a description, for -h.
func newFlagSet(name, synopsis, about string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: idemkey %s %s\n\n%s\nFlags:\n", name, synopsis, about)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and returns the exit code to stop with, if any:
// 0 for -h, 2 for a bad flag.
func parseFlags(fs *flag.FlagSet, args []string) (code int, stop bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, true
		}
		return 2, true
	}
	return 0, false
}

// usageError reports a usage error for command name and returns 2.
func usageError(stderr io.Writer, name, format string, args ...any) int {
	fmt.Fprintf(stderr, "idemkey %s: %s\nRun 'idemkey %s -h' for usage.\n", name, fmt.Sprintf(format, args...), name)
	return 2
}

// defaultRedisURL is --redis's default: $REDIS_URL, or empty.
func defaultRedisURL() string { return os.Getenv(redisEnv) }
