package contracttest

// Retention per route (issue 24): each middleware's Options.Retention
// gives the records of the routes it protects their own TTL, on one store.

import (
	"context"
	"fmt"
	"net/http"
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
