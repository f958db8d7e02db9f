package contracttest

// Regression tests for issue 22 items 9, 11 and 12 (hostile records, the
// unprotected case, a middleware mounted before the app's auth); each
// failed on the middleware before its fix.

import (
	"log/slog"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/httpmw"
)

func runIssue22(t *testing.T, mount Mount, b backend) {
	quiet := slog.New(slog.DiscardHandler)

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
}
