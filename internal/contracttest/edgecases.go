package contracttest

// Edge cases of the contract: a stored response that decompresses beyond
// MaxResponseBytes, a request left unprotected (Optional without a key,
// FailOpen with Redis down) that still gets fresh derived keys and a
// working Checkpoint, and a middleware mounted before the app's auth; each
// failed on the middleware before its fix.

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/internal/redistest"
)

// runEdgeCases runs the edge cases on mount and b.
func runEdgeCases(t *testing.T, mount Mount, b backend) {
	quiet := slog.New(slog.DiscardHandler)
	const payment = `{"amount": 1200, "currency": "EUR", "customer": "cus_1"}`

	t.Run("a stored response that decompresses beyond MaxResponseBytes is refused as corrupt", func(t *testing.T) {
		// An instance with a large MaxResponseBytes stores 2 MiB of zeros
		// compressed (a record of a few hundred bytes); one with the
		// default 1 MiB must not inflate it.
		const n = 2 << 20
		app := newApp()
		large := newEnv(t, b, mount, envConfig{app: app, opts: httpmw.Options{Compress: true, MaxResponseBytes: 4 << 20, Logger: quiet}})
		small := newEnv(t, b, mount, envConfig{app: app, opts: httpmw.Options{Compress: true, Logger: quiet}})
		key := newKey()
		path := "/zeros?n=" + strconv.Itoa(n)
		first := large.do(req{path: path, key: key})
		require.Equal(t, http.StatusCreated, first.status)
		require.Len(t, first.body, n)
		require.True(t, large.do(req{path: path, key: key}).replayed(), "replays within its own bound")

		r := small.do(req{path: path, key: key})
		require.Equal(t, http.StatusInternalServerError, r.status, "a %d-byte replay from a record made for at most 1 MiB", len(r.body))
		require.Equal(t, "stored-response-unreadable", r.problemType(t))
		require.Equal(t, 1, app.runsOf(key), "it ran once and is not run again")
	})

	// unprotected checks what a handler the middleware let through
	// unprotected gets: a derived key per step that is never empty and
	// differs on every request, attempt 0, and a Checkpoint that succeeds.
	unprotected := func(t *testing.T, send func() *response) {
		t.Helper()
		var seen []string
		for range 2 {
			r := send()
			require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
			f := strings.Fields(string(r.body))
			require.Len(t, f, 4, "%s", r.body)
			charge, again, refund, attempt := f[0], f[1], f[2], f[3]
			require.Len(t, charge, 32, "an unprotected request's provider call has no idempotency key")
			require.Equal(t, charge, again, "one step, one key within the request")
			require.NotEqual(t, charge, refund)
			require.Equal(t, "0", attempt)
			seen = append(seen, charge)
		}
		require.NotEqual(t, seen[0], seen[1], "a fresh derived key per request")
	}

	t.Run("Optional without a key: fresh derived keys per request, Checkpoint succeeds", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{opts: httpmw.Options{Optional: true}})
		unprotected(t, func() *response { return e.do(req{path: "/steps", noKey: true}) })
	})

	t.Run("a middleware mounted before the app's auth logs the likely cause once", func(t *testing.T) {
		// Scope reads the user the app's auth puts in the context, but the
		// auth runs inside the app, after the middleware: every logged-in
		// user gets 401.
		type userKey struct{}
		var logged bytes.Buffer
		e := newEnv(t, b, mount, envConfig{opts: httpmw.Options{
			Logger: slog.New(slog.NewTextHandler(&logged, nil)),
			Scope: func(r *http.Request) (string, error) {
				if u, _ := r.Context().Value(userKey{}).(string); u != "" {
					return u, nil
				}
				return "", errors.New("no user in the context")
			},
		}})
		for range 3 {
			r := e.do(req{key: newKey(), body: payment})
			require.Equal(t, http.StatusUnauthorized, r.status)
		}
		require.Equal(t, 1, strings.Count(logged.String(), "before your authentication"), "%s", &logged)
	})

	if b.srv == nil {
		return
	}
	t.Run("FailOpen with Redis down: fresh derived keys per request, Checkpoint succeeds", func(t *testing.T) {
		srv := redistest.Start(t)
		e := newEnv(t, b.on(srv), mount, envConfig{opts: httpmw.Options{FailOpen: true, Timeout: 300 * time.Millisecond, Logger: quiet}})
		srv.Kill()
		unprotected(t, func() *response { return e.do(req{path: "/steps", key: newKey()}) })
	})
}
