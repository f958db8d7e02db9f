package faulttest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/internal/syncbuf"
	"github.com/idemkey/idemkey/observe"
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

// TestRedisWithoutPersistenceAnswers503: a store that requires persistence
// refuses to serve on a Redis with neither AOF nor RDB: 503
// store-unavailable, the handler never runs, with FailOpen too (such a
// Redis is reachable: running unprotected would only hide it).
func TestRedisWithoutPersistenceAnswers503(t *testing.T) {
	srv := redistest.Start(t) // --save "" --appendonly no
	for _, failOpen := range []bool{false, true} {
		for _, v := range []via{direct, pipelined} {
			a := newApp(t, v.scripter(t, srv.Client(t)), redisstore.Options{RequirePersistence: true}, httpmw.Options{FailOpen: failOpen}, nil)
			code, _, body := send(t, a.srv.URL, "k-volatile", `{"amount":1}`)
			require.Equal(t, http.StatusServiceUnavailable, code, "FailOpen %v, via %v: %s", failOpen, v, body)
			require.True(t, strings.Contains(body, "store-unavailable"), body)
			require.Zero(t, a.total(), "the handler ran")
		}
	}
}

// TestRefusedRedisAnswers503Fast: with Redis refusing connections (a
// stopped redis-server), every request's 503, the first after the stop
// included, comes from the refusal, not from a Timeout: the store's
// Unavailable event for each carries the refusal (ECONNREFUSED) and no
// deadline, on the plain client and on the auto-pipeliner. The middleware's
// Timeout is 1s, which is the promise (a refused connection answers well
// under a second) and shorter than go-redis's dial retries (at least 1.6s
// of fixed 100ms sleeps), which the first request after the stop used to
// wait out until its Timeout (serve answered 503 after 2.009s); the
// refusal path answers in milliseconds, over 4x within it. The outage is
// logged once, as an error naming the refusal.
func TestRefusedRedisAnswers503Fast(t *testing.T) {
	for _, v := range []via{direct, pipelined} {
		t.Run(map[via]string{direct: "client", pipelined: "pipelined"}[v], func(t *testing.T) {
			srv := redistest.Start(t)
			var storeLog, log syncBuffer
			events := &unavailable{}
			// RequireNoEviction: the first request waits for the start-up
			// check, which tells the store a pipeliner reaches one server.
			a := newApp(t, v.scripter(t, srv.Client(t)),
				redisstore.Options{RequireNoEviction: true, Observer: events, Logger: slog.New(slog.NewTextHandler(&storeLog, nil))},
				httpmw.Options{Timeout: time.Second, Logger: slog.New(slog.NewTextHandler(&log, nil))}, nil)
			code, _, _ := send(t, a.srv.URL, "k-before", `{"amount":1}`)
			require.Equal(t, http.StatusCreated, code)

			srv.Stop()
			const n = 10
			for i := range n {
				code, _, body := send(t, a.srv.URL, fmt.Sprint("k-down-", i), `{"amount":1}`)
				require.Equal(t, http.StatusServiceUnavailable, code, body)
			}
			errs := events.errs()
			require.Len(t, errs, n, "one Unavailable event per 503")
			for i, err := range errs {
				require.ErrorIs(t, err, syscall.ECONNREFUSED, "503 #%d did not come from the refusal", i)
				require.NotErrorIs(t, err, context.DeadlineExceeded, "503 #%d waited for its Timeout", i)
			}
			require.Equal(t, 1, a.total(), "the handler ran while Redis was down")
			require.Contains(t, log.String(), "connection refused")
			require.Equal(t, 1, strings.Count(storeLog.String(), "Redis refuses connections"), "the outage logged once: %s", storeLog.String())
		})
	}
}

// unavailable records the errors of the store's Unavailable events.
type unavailable struct {
	mu   sync.Mutex
	list []error
}

func (u *unavailable) Event(_ context.Context, e *observe.Event) {
	if e.Kind == observe.Unavailable {
		u.mu.Lock()
		u.list = append(u.list, e.Err)
		u.mu.Unlock()
	}
}

func (u *unavailable) Redis(context.Context, *observe.Call) {}

func (u *unavailable) errs() []error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.list)
}

type syncBuffer = syncbuf.Buffer

// TestOutageIsLoggedOncePerCause: during an outage every refused request
// gets its 503, but the log says it once: one WARN per cause (here the
// refusal) within the minute, the store's one-line ERROR when the outage
// begins, and its INFO when Redis answers again. It used to be one WARN
// per refused request (268 lines in 4 s).
func TestOutageIsLoggedOncePerCause(t *testing.T) {
	srv := redistest.Start(t)
	var log syncBuffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	a := newApp(t, srv.Client(t), redisstore.Options{NoStartupCheck: true, Logger: logger}, httpmw.Options{Logger: logger}, nil)
	code, _, _ := send(t, a.srv.URL, "k-before", `{"amount":1}`)
	require.Equal(t, http.StatusCreated, code)

	srv.Stop()
	const n = 30
	for i := range n {
		code, _, body := send(t, a.srv.URL, fmt.Sprint("k-down-", i), `{"amount":1}`)
		require.Equal(t, http.StatusServiceUnavailable, code, body)
	}
	srv.Restart(t)
	require.Eventually(t, func() bool {
		code, _, _ := send(t, a.srv.URL, "k-after", `{"amount":1}`)
		return code == http.StatusCreated
	}, 10*time.Second, 10*time.Millisecond)

	out := log.String()
	require.Equal(t, 1, strings.Count(out, `msg="idemkey: store unavailable"`), "one line per refused request:\n%s", out)
	require.Contains(t, out, "cause=refused")
	require.Equal(t, 1, strings.Count(out, "level=ERROR"), out)
	require.Contains(t, out, `level=ERROR msg="redisstore: Redis refuses connections`)
	require.Contains(t, out, `level=INFO msg="redisstore: Redis answers again"`)
	require.Equal(t, 1, strings.Count(out, "level=WARN"), out)
}
