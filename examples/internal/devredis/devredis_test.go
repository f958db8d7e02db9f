package devredis

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

func TestOpen(t *testing.T) {
	ping := func(t *testing.T, url, wantWhere string) {
		client, where, closeAll, err := Open(url)
		require.NoError(t, err)
		defer closeAll()
		require.Contains(t, where, wantWhere)
		require.NoError(t, client.Ping(context.Background()).Err())
	}
	t.Run("embedded", func(t *testing.T) { ping(t, "", "embedded miniredis at redis://127.0.0.1:") })
	t.Run("url", func(t *testing.T) {
		addr := redistest.Start(t).Addr()
		ping(t, "redis://"+addr+"/0", "redis at "+addr+" db 0")
	})
}

// The description of a server given by URL never shows its password.
func TestOpenHidesCredentials(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.RequireUserAuth("app", "s3cret-pass")
	client, where, closeAll, err := Open("redis://app:s3cret-pass@" + mr.Addr() + "/0")
	require.NoError(t, err)
	defer closeAll()
	require.NoError(t, client.Ping(context.Background()).Err())
	require.Equal(t, "redis at "+mr.Addr()+" db 0", where)
	require.NotContains(t, where, "s3cret")
}

func TestOpenFailsFast(t *testing.T) {
	_, _, _, err := Open("redis://127.0.0.1:1/0")
	require.ErrorContains(t, err, "redis at 127.0.0.1:1")
	_, _, _, err = Open("http://nope")
	require.ErrorContains(t, err, "redis URL")
}

// A URL that does not parse is never echoed: url.Parse's errors quote the
// whole URL, password included.
func TestOpenBadURLHidesCredentials(t *testing.T) {
	for _, url := range []string{
		"redis://app:s3cret-pass@127.0.0.1:notaport/0",
		"redis://app:s3cret-pass@127.0.0.1:1/notadb",
		"redis://app:s3cret%zzpass@127.0.0.1:1/0",
		"ftp://app:s3cret-pass@127.0.0.1:1/0",
	} {
		_, _, _, err := Open(url)
		require.Error(t, err, url)
		require.NotContains(t, err.Error(), "s3cret", url)
		require.ErrorContains(t, err, "redis URL")
	}
}

// URL falls back to $REDIS_URL only after the flags are parsed, so that a
// flag's default (printed by -h and by every usage error) never holds it.
func TestURLFromTheEnvironment(t *testing.T) {
	t.Setenv("REDIS_URL", "redis://app:s3cret-pass@127.0.0.1:1/0")
	require.Equal(t, "redis://app:s3cret-pass@127.0.0.1:1/0", URL(""))
	require.Equal(t, "redis://127.0.0.1:2/0", URL("redis://127.0.0.1:2/0"))
}

// The embedded miniredis tells the store's start-up check that it never
// evicts, so that the examples' stores (RequireNoEviction) serve without a
// warning about eviction (and warn, truly, that it persists nothing); a
// real Redis that may evict is refused.
func TestEmbeddedSaysItNeverEvicts(t *testing.T) {
	ctx := context.Background()
	claim := func(t *testing.T, url string) (logged string, err error) {
		client, _, closeAll, err := Open(url)
		require.NoError(t, err)
		t.Cleanup(closeAll)
		var logs bytes.Buffer
		store, err := redisstore.New(client, redisstore.Options{RequireNoEviction: true,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		// With RequireNoEviction the claim waits for the check's verdict,
		// which is logged before the claim returns.
		_, err = store.Claim(ctx, redisstore.Request{Scope: "s", Key: "k"})
		return logs.String(), err
	}

	logs, err := claim(t, "")
	require.NoError(t, err)
	require.NotContains(t, logs, "maxmemory-policy", "no warning about maxmemory-policy")
	require.NotContains(t, logs, "managed Redis")
	require.Contains(t, logs, "persistence: neither AOF nor RDB", "the truth: the embedded Redis is gone on exit")
	client, _, closeAll, err := Open("")
	require.NoError(t, err)
	defer closeAll()
	m, err := client.ConfigGet(ctx, "maxmemory*").Result()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"maxmemory": "0", "maxmemory-policy": "noeviction"}, m)
	m, err = client.ConfigGet(ctx, "save").Result()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"save": ""}, m)
	require.Error(t, client.ConfigSet(ctx, "maxmemory", "1mb").Err())

	srv := redistest.Start(t, redistest.Args("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"))
	logs, err = claim(t, "redis://"+srv.Addr()+"/0")
	require.ErrorIs(t, err, redisstore.ErrEvicting)
	require.Contains(t, logs, "allkeys-lru")
}
