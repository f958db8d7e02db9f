package idemkeytest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/internal/verify"
	"github.com/idemkey/idemkey/redisstore"
)

// NewStore returns a store with opts on a fresh embedded Redis (miniredis)
// that lives until tb's end, for tests that have no Redis of their own,
// and a client of that Redis, for Config.Redis. It fails tb if either
// cannot be made.
//
// miniredis runs the store's scripts as Redis would, but it is not Redis
// (its clock moves only when a test moves it, for one): test against a
// real redis-server too before relying on timing.
//
// Without opts.Logger, what the store logs goes to tb.Logf (shown with -v
// or when the test fails), never to slog's default logger, until the test
// ends. Unless opts asks for RequireNoEviction or RequirePersistence, the
// store skips its start-up check (opts.NoStartupCheck), which would only
// warn that it cannot read miniredis's eviction policy and persistence:
// miniredis neither evicts nor persists, by design.
func NewStore(tb testing.TB, opts redisstore.Options) (*redisstore.Store, *redis.Client) {
	tb.Helper()
	if opts.Logger == nil {
		w := &tbWriter{tb: tb}
		tb.Cleanup(w.close)
		opts.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{
			// The time is tb.Logf's business; a constant line reads better.
			ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
				if len(groups) == 0 && a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}}))
	}
	if !opts.RequireNoEviction && !opts.RequirePersistence {
		opts.NoStartupCheck = true
	}
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		tb.Fatalf("idemkeytest: starting an embedded Redis: %v", err)
	}
	tb.Cleanup(mr.Close)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, opts)
	if err != nil {
		tb.Fatalf("idemkeytest: %v", err)
	}
	return store, rdb
}

// tbWriter writes a store's log lines to tb.Logf until the test ends:
// testing panics on a Logf after that, and the store may log from its
// background work (the start-up check) at any time.
type tbWriter struct {
	mu    sync.Mutex
	tb    testing.TB
	ended bool
}

func (w *tbWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ended {
		w.tb.Logf("idemkeytest: store: %s", strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *tbWriter) close() {
	w.mu.Lock()
	w.ended = true
	w.mu.Unlock()
}

// records lists the keys under prefix with their TTLs, on every master of
// a cluster, for the ttl check.
func records(rdb redis.UniversalClient, prefix string) func(context.Context) ([]verify.Record, error) {
	return func(ctx context.Context) ([]verify.Record, error) {
		var mu sync.Mutex
		var out []verify.Record
		scan := func(ctx context.Context, c redis.Cmdable) error {
			iter := c.Scan(ctx, 0, globEscape(prefix)+"*", 1000).Iterator()
			for iter.Next(ctx) {
				key := iter.Val()
				ttl, err := c.PTTL(ctx, key).Result()
				if err != nil {
					return fmt.Errorf("PTTL %q: %w", key, err)
				}
				if ttl == -2 { // gone since the scan saw it
					continue
				}
				mu.Lock()
				out = append(out, verify.Record{Key: key, TTL: ttl})
				n := len(out)
				mu.Unlock()
				if n > maxRecords {
					return fmt.Errorf("over %d keys under %q: give the test a Redis of its own", maxRecords, prefix)
				}
			}
			return iter.Err()
		}
		var err error
		if cc, ok := rdb.(*redis.ClusterClient); ok {
			err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
		} else {
			err = scan(ctx, rdb)
		}
		if err != nil {
			return nil, fmt.Errorf("reading the keys of Config.Redis: %w", err)
		}
		return out, nil
	}
}

// globEscape escapes the SCAN MATCH pattern characters in s.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
