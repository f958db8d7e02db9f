package main

import (
	"bufio"
	"context"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

// serve starts run with args and env, and returns the base URL it listens on
// and the line saying which Redis it uses. The server stops at cleanup.
func serve(t *testing.T, args []string, env map[string]string) (base, redisLine string) {
	t.Helper()
	gin.SetMode(gin.ReleaseMode)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // also when a require below stops the test early
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"--addr", "127.0.0.1:0", "--provider-latency", "0s"}, args...), func(k string) string { return env[k] }, pw)
		_ = pw.Close()
	}()
	r := bufio.NewReader(pr)
	for i := 0; i < 10 && base == ""; i++ {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		line = strings.TrimSpace(line)
		if l, ok := strings.CutPrefix(line, "listening on "); ok {
			base = l
		} else if strings.HasPrefix(line, "redis: ") {
			redisLine = line
		}
	}
	require.NotEmpty(t, base)
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(15 * time.Second):
			t.Error("server did not shut down")
		}
	})
	return base, redisLine
}

// pay sends the same payment under key twice and checks that the second is
// a replay.
func pay(t *testing.T, base, key string) {
	t.Helper()
	for i, want := range []string{"", "true"} {
		req, err := http.NewRequest(http.MethodPost, base+"/v1/payments", strings.NewReader(`{"amount":500,"currency":"USD","customer":"cus_9"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer t")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode, i)
		require.Equal(t, want, resp.Header.Get("Idempotent-Replayed"), i)
	}
}

func TestServerOnGivenRedis(t *testing.T) {
	addr := redistest.Start(t).Addr()
	url := "redis://" + addr + "/0"
	t.Run("flag", func(t *testing.T) {
		base, line := serve(t, []string{"--redis", url}, nil)
		require.Equal(t, "redis: redis at "+addr+" db 0", line)
		pay(t, base, "flag")
	})
	t.Run("env", func(t *testing.T) {
		base, line := serve(t, nil, map[string]string{"REDIS_URL": url})
		require.Equal(t, "redis: redis at "+addr+" db 0", line)
		pay(t, base, "env")
	})
}

// TestServerEmbeddedByDefault: with neither -redis nor REDIS_URL the server
// runs on an embedded miniredis, never on a Redis at a default address.
func TestServerEmbeddedByDefault(t *testing.T) {
	base, line := serve(t, nil, map[string]string{})
	require.Contains(t, line, "redis: embedded miniredis at redis://127.0.0.1:")
	require.NotContains(t, line, ":6379")
	pay(t, base, "embedded")
}

func TestServerNeedsRedis(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
	}{
		"flag": {[]string{"--redis", "redis://127.0.0.1:1/0"}, nil},
		"env":  {nil, map[string]string{"REDIS_URL": "redis://127.0.0.1:1/0"}},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := run(ctx, append([]string{"--addr", "127.0.0.1:0"}, tc.args...), func(k string) string { return tc.env[k] }, io.Discard)
			require.ErrorContains(t, err, "redis at 127.0.0.1:1")
		})
	}
}

// TestHelpHidesRedisURL: -h prints every flag's default, so $REDIS_URL
// (password and all) must not be one.
func TestHelpHidesRedisURL(t *testing.T) {
	var out strings.Builder
	env := map[string]string{"REDIS_URL": "redis://app:s3cret-pass@127.0.0.1:1/0"}
	err := run(context.Background(), []string{"-h"}, func(k string) string { return env[k] }, &out)
	require.ErrorIs(t, err, flag.ErrHelp)
	require.Contains(t, out.String(), "-redis")
	require.NotContains(t, out.String(), "s3cret")
}
