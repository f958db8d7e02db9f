package faulttest

import (
	"fmt"
	"github.com/idemkey/idemkey/internal/syncbuf"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

// TestEvictingRedisAnswers503: a store that requires noeviction refuses to
// serve on a Redis that evicts: 503 store-unavailable, the handler never
// runs, with FailOpen too (an evicting Redis is reachable: running
// unprotected would only hide it).
func TestEvictingRedisAnswers503(t *testing.T) {
	srv := redistest.Start(t, redistest.Args("--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"))
	for _, failOpen := range []bool{false, true} {
		for _, v := range []via{direct, pipelined} {
			a := newApp(t, v.scripter(t, srv.Client(t)), redisstore.Options{RequireNoEviction: true}, httpmw.Options{FailOpen: failOpen}, nil)
			code, _, body := send(t, a.srv.URL, "k-evict", `{"amount":1}`)
			require.Equal(t, http.StatusServiceUnavailable, code, "FailOpen %v, via %v: %s", failOpen, v, body)
			require.True(t, strings.Contains(body, "store-unavailable"), body)
			require.Zero(t, a.total(), "the handler ran")
		}
	}
}

// TestRefusedRedisAnswers503Fast: with Redis refusing connections (a
// stopped redis-server), the 503s come at once, not each after the
// client's dial retries or the whole Timeout, and the log names the
// refusal, not "context deadline exceeded". The requests that find the
// refusal out wait: on the client, the first (its dial retries, ~1.7s); on
// the auto-pipeliner, those until its late answer (~3.4s after the stop).
func TestRefusedRedisAnswers503Fast(t *testing.T) {
	for _, v := range []via{direct, pipelined} {
		t.Run(map[via]string{direct: "client", pipelined: "pipelined"}[v], func(t *testing.T) {
			if v == pipelined {
				redistest.Long(t)
			}
			srv := redistest.Start(t)
			var log syncBuffer
			// RequireNoEviction: the first request waits for the start-up
			// check, which tells the store a pipeliner reaches one server.
			a := newApp(t, v.scripter(t, srv.Client(t)), redisstore.Options{RequireNoEviction: true, Logger: slog.New(slog.DiscardHandler)},
				httpmw.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))}, nil)
			code, _, _ := send(t, a.srv.URL, "k-before", `{"amount":1}`)
			require.Equal(t, http.StatusCreated, code)

			srv.Stop()
			stopped := time.Now()
			maxSlow := map[via]int{direct: 1, pipelined: 3}[v]
			var times []time.Duration
			fast := 0
			for i := 0; fast < 10; i++ {
				require.LessOrEqual(t, i-fast, maxSlow, "503s that waited for the client's retries or the Timeout: %v", times)
				start := time.Now()
				code, _, body := send(t, a.srv.URL, fmt.Sprint("k-down-", i), `{"amount":1}`)
				d := time.Since(start)
				require.Equal(t, http.StatusServiceUnavailable, code, body)
				times = append(times, d)
				if d < 500*time.Millisecond { // well below the 2s Timeout; holds at 4x slowdown
					fast++
				} else {
					require.Zero(t, fast, "a slow 503 after fast ones: %v", times)
				}
			}
			require.Equal(t, 1, a.total(), "the handler ran while Redis was down")
			require.Contains(t, log.String(), "connection refused")
			t.Logf("503s after the stop (%v in all): %v", time.Since(stopped).Round(time.Millisecond), times)
		})
	}
}

type syncBuffer = syncbuf.Buffer
