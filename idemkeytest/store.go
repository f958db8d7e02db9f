package idemkeytest

import (
	"context"
	"fmt"
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
func NewStore(tb testing.TB, opts redisstore.Options) (*redisstore.Store, *redis.Client) {
	tb.Helper()
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
