package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// redisEnv names the variable that gives the Redis URL when --redis is not set.
const redisEnv = "REDIS_URL"

// redisOptions parses the value of --redis (or $REDIS_URL): a redis://,
// rediss:// or unix:// URL, or host:port[/db] without a scheme, which is
// read as redis://host:port[/db].
func redisOptions(s string) (*redis.Options, error) {
	if s == "" {
		return nil, errors.New("--redis: empty; want host:port[/db] or a redis:// URL")
	}
	u := s
	if !strings.Contains(s, "://") {
		u = "redis://" + s
	}
	opts, err := redis.ParseURL(u)
	if err != nil {
		return nil, fmt.Errorf("--redis: want host:port[/db] or redis://[user:password@]host:port[/db] (rediss:// for TLS): %w", err)
	}
	return opts, nil
}

// connect opens a client for the value of --redis (see redisOptions) and
// checks that the server answers.
func connect(ctx context.Context, rawURL string) (*redis.Client, error) {
	opts, err := redisOptions(rawURL)
	if err != nil {
		return nil, err
	}
	// Without it go-redis ignores context deadlines, and a hung Redis would
	// hold every request for its ReadTimeout.
	opts.ContextTimeoutEnabled = true
	// The auto-pipeliner gives a stalled connection up only at the read
	// timeout: keep it near the middleware's Timeout (2s).
	if opts.ReadTimeout == 0 {
		opts.ReadTimeout = 2 * time.Second
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = opts.ReadTimeout // as go-redis does
	}
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
func redisName(rdb *redis.Client) string { return optionsName(rdb.Options()) }

// optionsName describes the server of client options, without credentials.
func optionsName(o *redis.Options) string { return fmt.Sprintf("%s db %d", o.Addr, o.DB) }

// quietRedisLog drops go-redis's own log lines (a dial retried five times
// prints four), for the one-shot commands that report a failure to connect
// themselves.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// storeClient is what the store sends its scripts through: the client's
// shared auto-pipeliner, which batches concurrent requests' calls (see
// docs/pipelining.md), or with plain the client itself.
func storeClient(rdb *redis.Client, plain bool) (redis.Scripter, error) {
	if plain {
		return rdb, nil
	}
	ap, err := rdb.AutoPipeline()
	if err != nil {
		return nil, fmt.Errorf("auto-pipeliner: %w", err)
	}
	return ap, nil
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
