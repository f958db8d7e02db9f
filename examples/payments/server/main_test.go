package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

func TestServerServesAndShutsDown(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	srv := redistest.Start(t)
	env := map[string]string{"REDIS_URL": "redis://" + srv.Addr() + "/0"}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--provider-latency", "0s"}, func(k string) string { return env[k] }, pw)
		_ = pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err)
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	require.True(t, ok, line)

	for i, want := range []string{"", "true"} {
		req, err := http.NewRequest(http.MethodPost, base+"/v1/payments", strings.NewReader(`{"amount":500,"currency":"USD","customer":"cus_9"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer t")
		req.Header.Set("Idempotency-Key", "server-test")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode, i)
		require.Equal(t, want, resp.Header.Get("Idempotent-Replayed"), i)
	}

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("server did not shut down")
	}
}

func TestServerNeedsRedis(t *testing.T) {
	env := map[string]string{"REDIS_URL": "redis://127.0.0.1:1/0"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := run(ctx, []string{"--addr", "127.0.0.1:0"}, func(k string) string { return env[k] }, io.Discard)
	require.ErrorContains(t, err, "redis at 127.0.0.1:1")
}
