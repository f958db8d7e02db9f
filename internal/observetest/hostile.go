package observetest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/redisstore"
)

// The routes Hostile's requests report, as the middleware names them: a
// request no pattern matched, and one ServeMux pattern.
const (
	UnmatchedRoute = "POST unmatched"
	ItemsRoute     = "POST /v1/items/{id}"
)

// HostilePaths is how many distinct paths Hostile sends to a handler
// without a pattern, and ItemPaths how many distinct IDs to ItemsRoute.
const (
	HostilePaths = 1000
	ItemPaths    = 100
)

// BadLabel is the Label of Hostile's Store.Do calls: not valid UTF-8.
const BadLabel = "send \xff\xfe"

// Hostile sends what an attacker and an unlucky deployment send, on a
// private redis-server, with the stores reporting to obs: POST /%FF (a path
// that is not valid UTF-8) and its retries; a takeover of a /%FF key whose
// first attempt stalled past its lease; HostilePaths distinct paths with no
// route pattern and ItemPaths distinct IDs on one pattern; and Store.Do
// calls labelled BadLabel, one of them a takeover. Whatever obs does
// (panics included), every request must get its answer, every retry the
// stored one, and every run must end its lease: Hostile asserts that, and
// returns once every request's last event has reached obs. It skips the
// test when redis-server is missing. Of cfg it uses Observer, Wrap and Do.
func Hostile(t *testing.T, cfg Config) {
	obs := &counted{Observer: cfg.Observer}
	rig := newRig(t, obs)
	main, stalling, probe := rig.main, rig.stalling, rig.probe

	stallStarted, stallGo := make(chan struct{}, 1), make(chan struct{})
	openStall := sync.OnceFunc(func() { close(stallGo) })
	server := func(store *redisstore.Store, stall bool) *httptest.Server {
		mw := middleware(store)
		mux := http.NewServeMux()
		mux.Handle("POST /v1/items/{id}", mw(http.HandlerFunc(created)))
		// Any other path reaches the middleware without a pattern.
		unmatched := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if stall {
				stallStarted <- struct{}{}
				<-stallGo // past MaxDuration: its heartbeat stops and its lease runs out
			}
			created(w, r)
		}))
		return serve(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/v1/items/") {
				mux.ServeHTTP(w, r)
				return
			}
			unmatched.ServeHTTP(w, r)
		}))
	}
	mainSrv, stallSrv := server(main, false), server(stalling, true)
	t.Cleanup(openStall) // before the servers close: no handler stays blocked

	hc := &http.Client{Timeout: 30 * time.Second}
	send := func(base, path, key string) (int, string, error) {
		req, err := newRequest(base, path, key, `{}`)
		if err != nil {
			return 0, "", err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), nil
	}
	var requests int64 // requests sent whose last event must come
	post := func(base, path, key, replayed string) {
		t.Helper()
		requests++
		status, rep, err := send(base, path, key)
		require.NoError(t, err, "POST %s (key %s): the answer must reach the client", path, key)
		require.Equal(t, http.StatusCreated, status, "POST %s (key %s)", path, key)
		require.Equal(t, replayed, rep, "POST %s (key %s): Idempotent-Replayed", path, key)
	}
	scope, ctx := scope(t), context.Background()
	waitLeaseOut := func(scope, key string) { t.Helper(); rig.waitLeaseOut(t, scope, key) }
	completed := func(scope, key string) {
		t.Helper()
		rec, err := probe.Lookup(ctx, scope, key)
		require.NoError(t, err)
		require.Equal(t, redisstore.Completed, rec.State, "key %s: the run ended and stored its outcome", key)
	}

	// A path that is not valid UTF-8, and its retries.
	post(mainSrv.URL, "/%FF", "bad-1", "")
	post(mainSrv.URL, "/%FF", "bad-1", "true")
	post(mainSrv.URL, "/%FF", "bad-1", "true")
	completed(scope, "bad-1")

	// A takeover of such a path: the first attempt stalls past its lease.
	stalled := make(chan error, 1)
	go func() {
		_, _, err := send(stallSrv.URL, "/%FF", "bad-2")
		stalled <- err
	}()
	select {
	case <-stallStarted:
	case <-time.After(30 * time.Second):
		t.Fatal("observetest: the stalling handler did not start within 30s")
	}
	requests++ // the stalled request
	waitLeaseOut(scope, "bad-2")
	post(mainSrv.URL, "/%FF", "bad-2", "")
	post(mainSrv.URL, "/%FF", "bad-2", "true")
	completed(scope, "bad-2")
	openStall()
	select {
	case err := <-stalled:
		require.NoError(t, err, "the stalled run answers; its outcome is refused")
	case <-time.After(30 * time.Second):
		t.Fatal("observetest: the stalled request got no answer within 30s")
	}

	// Distinct paths: with no pattern, and on one pattern.
	var wg sync.WaitGroup
	errs := make(chan error, HostilePaths+ItemPaths)
	paths := make(chan [2]string)
	for range 8 {
		wg.Go(func() {
			for p := range paths {
				status, _, err := send(mainSrv.URL, p[0], p[1])
				if err == nil && status != http.StatusCreated {
					err = fmt.Errorf("POST %s: status %d", p[0], status)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range HostilePaths {
		paths <- [2]string{fmt.Sprintf("/orders/%d/%%C3%%A9t%%C3%%A9", i), fmt.Sprintf("path-%d", i)}
	}
	for i := range ItemPaths {
		paths <- [2]string{fmt.Sprintf("/v1/items/%d", i), fmt.Sprintf("item-%d", i)}
	}
	close(paths)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	requests += HostilePaths + ItemPaths

	// Store.Do with a label that is not valid UTF-8: a run, a replay, and a
	// takeover of a claim whose owner never came back.
	run := func(ctx context.Context, _ *redisstore.Lease) ([]byte, error) { return []byte("sent"), nil }
	do := func(req redisstore.Request) (*redisstore.Result, error) {
		ctx, end := ctx, func() {}
		if cfg.Do != nil {
			ctx, end = cfg.Do(ctx)
		}
		defer end()
		return main.Do(ctx, req, run)
	}
	req := redisstore.Request{Scope: "jobs", Key: "do-1", Label: BadLabel}
	for i := range 2 {
		requests++
		res, err := do(req)
		require.NoError(t, err)
		require.Equal(t, i > 0, res.Replayed)
	}
	req.Key = "do-2"
	c, err := stalling.Claim(ctx, req) // no decision follows; never completed, never extended
	require.NoError(t, err)
	require.Equal(t, redisstore.Claimed, c.Status)
	waitLeaseOut(req.Scope, req.Key)
	requests++
	res, err := do(req)
	require.NoError(t, err)
	require.False(t, res.Replayed)
	completed(req.Scope, req.Key)

	deadline := time.Now().Add(10 * time.Second)
	for obs.ended.Load() < requests {
		require.True(t, time.Now().Before(deadline), "%d of %d requests' last events came within 10s", obs.ended.Load(), requests)
		time.Sleep(time.Millisecond)
	}
}
