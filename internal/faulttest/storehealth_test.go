package faulttest

import (
	"net/http"
	"strings"
	"testing"

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
