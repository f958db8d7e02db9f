package contracttest

// Retention per route: each middleware's Options.Retention
// gives the records of the routes it protects their own TTL, on one store
// ("two routes on one store…"; the first case gives each route a prefix of
// its own, to find its record).

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/redisstore"
)

func runRetention(t *testing.T, mount Mount, b backend) {
	const payment = `{"amount": 1200, "currency": "EUR", "customer": "cus_1"}`

	t.Run("each route's records live its own Retention", func(t *testing.T) {
		app := newApp()
		for i, ret := range []time.Duration{0, 10 * time.Minute, 7 * 24 * time.Hour} {
			// A prefix per route, to find its records by scanning.
			e := newEnv(t, b, mount, envConfig{app: app, store: redisstore.Options{Prefix: fmt.Sprintf("ret%d-%d:", seq.Add(1), i)},
				opts: httpmw.Options{Retention: ret}})
			key := newKey()
			require.Equal(t, http.StatusCreated, e.do(req{key: key, body: payment}).status)
			require.True(t, e.do(req{key: key, body: payment}).replayed())
			want := ret
			if want == 0 {
				want = e.store.Options().Retention
			}
			n := 0
			_, err := e.store.Scan(context.Background(), redisstore.ScanOptions{}, func(sc *redisstore.Scanned) error {
				n++
				require.NotNil(t, sc.Record, sc.Problem)
				require.Equal(t, redisstore.Completed, sc.Record.State)
				require.InDelta(t, want.Seconds(), sc.Record.TTL.Seconds(), 60, "route %d: TTL %v, want %v", i, sc.Record.TTL, want)
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}
	})

	t.Run("two routes on one store and one prefix keep their own Retention", func(t *testing.T) {
		// One store, mounted once per route with that route's Retention,
		// as an application protects its routes: the records share the
		// prefix, and each gets its own route's TTL.
		rdb := b.scripter(t)
		store, err := redisstore.New(rdb, redisstore.Options{Prefix: fmt.Sprintf("ret%d:", seq.Add(1))})
		require.NoError(t, err)
		app := newApp()
		routes := []struct {
			path      string
			status    int // what the route answers: how the scan tells its record
			retention time.Duration
		}{
			{"/payments", http.StatusCreated, 10 * time.Minute},
			{"/status/202", http.StatusAccepted, 7 * 24 * time.Hour},
			{"/status/200", http.StatusOK, 0}, // the store's
		}
		mux := http.NewServeMux()
		for _, r := range routes {
			mux.Handle(r.path, mount(t, store, httpmw.Options{Retention: r.retention}, app.handler()))
		}
		e := &env{t: t, b: b, rdb: rdb, store: store, app: app, h: mux, srv: httptest.NewServer(mux)}
		t.Cleanup(e.srv.Close)
		t.Cleanup(app.open)
		want := map[int]time.Duration{}
		for _, r := range routes {
			key := newKey()
			require.Equal(t, r.status, e.do(req{path: r.path, key: key, body: payment}).status, r.path)
			require.True(t, e.do(req{path: r.path, key: key, body: payment}).replayed(), r.path)
			want[r.status] = cmp.Or(r.retention, store.Options().Retention)
		}
		seen := map[int]bool{}
		_, err = store.Scan(context.Background(), redisstore.ScanOptions{}, func(sc *redisstore.Scanned) error {
			require.NotNil(t, sc.Record, sc.Problem)
			require.Equal(t, redisstore.Completed, sc.Record.State)
			code := sc.Record.Response.Code
			require.Contains(t, want, code, "a record of no route")
			require.False(t, seen[code], "one record per route")
			seen[code] = true
			require.InDelta(t, want[code].Seconds(), sc.Record.TTL.Seconds(), 60, "status %d: TTL %v, want %v", code, sc.Record.TTL, want[code])
			return nil
		})
		require.NoError(t, err)
		require.Len(t, seen, len(routes))
	})

	t.Run("a retry after the route's Retention runs again", func(t *testing.T) {
		// A prefix of its own: the scan below waits for this record alone.
		e := newEnv(t, b, mount, envConfig{store: redisstore.Options{Prefix: fmt.Sprintf("ret%d:", seq.Add(1)), Lease: 200 * time.Millisecond},
			opts: httpmw.Options{Retention: 700 * time.Millisecond}})
		key := newKey()
		require.Equal(t, http.StatusCreated, e.do(req{key: key, body: payment}).status)
		require.True(t, e.do(req{key: key, body: payment}).replayed())
		if b.mr != nil {
			b.mr.FastForward(time.Second)
		} else {
			require.Eventually(t, func() bool {
				_, err := e.store.Scan(context.Background(), redisstore.ScanOptions{}, func(*redisstore.Scanned) error { return errFound })
				return err == nil
			}, 10*time.Second, 20*time.Millisecond, "the record outlived its retention")
		}
		again := e.do(req{key: key, body: payment})
		require.Equal(t, http.StatusCreated, again.status)
		require.False(t, again.replayed())
		require.Equal(t, 2, e.app.runsOf(key))
	})

	t.Run("a Retention the store refuses panics when the middleware is built", func(t *testing.T) {
		store, err := redisstore.New(b.scripter(t), redisstore.Options{Lease: 10 * time.Second, MaxDuration: time.Minute})
		require.NoError(t, err)
		for _, d := range []time.Duration{-time.Second, time.Second, 10 * time.Second, time.Minute} {
			require.PanicsWithValue(t, "idemkey: Options.Retention: "+store.ValidateRetention(d).Error(), func() {
				mount(t, store, httpmw.Options{Retention: d}, newApp().handler())
			}, "%v", d)
		}
		require.NotPanics(t, func() { mount(t, store, httpmw.Options{Retention: time.Hour}, newApp().handler()) })
	})
}

// errFound stops a scan at its first record.
var errFound = fmt.Errorf("found")
