package contracttest

// Regression tests for exactly once on every path and for safe defaults;
// each failed on the middleware before its fix.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/internal/syncbuf"
)

func runExactlyOnce(t *testing.T, mount Mount, b backend) {
	t.Run("a client that gives up does not cancel the run: the retry gets 409, then the replay", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{})
		key := newKey()
		ctx, cancel := context.WithCancel(context.Background())
		gaveUp := make(chan error, 1)
		go func() {
			hr := e.newRequest(req{path: "/ctxwork", key: key}).WithContext(ctx)
			resp, err := e.srv.Client().Do(hr)
			if err == nil {
				resp.Body.Close()
			}
			gaveUp <- err
		}()
		require.Equal(t, key, <-e.app.started)
		cancel() // the client times out after the charge
		require.Error(t, <-gaveUp)

		retry := e.do(req{path: "/ctxwork", key: key})
		require.Equal(t, http.StatusConflict, retry.status, "the run is still going: %s", retry.body)
		e.app.open()
		require.Eventually(t, func() bool {
			r := e.do(req{path: "/ctxwork", key: key})
			return r.status == http.StatusCreated && r.replayed() && string(r.body) == "charged and ordered"
		}, 10*time.Second, 10*time.Millisecond)
		require.Equal(t, 1, e.app.chargesOf(key), "charged twice")
	})

	t.Run("a request without a credential the default scope knows is refused", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{opts: httpmw.Options{Logger: slog.New(slog.DiscardHandler)}})
		key := newKey()
		for _, h := range []http.Header{nil, {"Cookie": {"session=alice"}}, {"X-User": {"alice"}}} {
			r := e.do(req{key: key, body: `{"a":1}`, noAuth: true, header: h})
			require.Equal(t, http.StatusInternalServerError, r.status, "%s", r.body)
			require.Equal(t, "scope-required", r.problemType(t))
		}
		require.Zero(t, e.app.runsOf(key), "nothing ran")
	})

	t.Run("the default scope warns once, at first use, that a refreshed credential runs the retry again", func(t *testing.T) {
		var logged syncbuf.Buffer
		e := newEnv(t, b, mount, envConfig{opts: httpmw.Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))}})
		key := newKey()
		for _, token := range []string{"alice-1", "alice-2", "alice-3"} {
			r := e.do(req{key: key, body: `{"a":1}`, auth: "Bearer " + token})
			require.Equal(t, http.StatusCreated, r.status)
			require.False(t, r.replayed(), "the default scope follows the credential: a refreshed token is a new scope")
		}
		require.Equal(t, 3, e.app.runsOf(key))
		lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
		var warned []string
		for _, l := range lines {
			if strings.Contains(l, "default scope") {
				warned = append(warned, l)
			}
		}
		require.Len(t, warned, 1, "once per middleware: %s", logged.String())
		for _, want := range []string{"level=WARN", "refresh", "Options.Scope"} {
			require.Contains(t, warned[0], want)
		}

		for name, scope := range map[string]func(*http.Request) (string, error){
			"a Scope of its own": func(*http.Request) (string, error) { return "alice", nil },
			"SharedScope":        httpmw.SharedScope("everyone"),
		} {
			var logged syncbuf.Buffer
			e := newEnv(t, b, mount, envConfig{opts: httpmw.Options{Scope: scope, Logger: slog.New(slog.NewTextHandler(&logged, nil))}})
			require.Equal(t, http.StatusCreated, e.do(req{key: newKey(), body: `{"a":1}`}).status, name)
			require.NotContains(t, logged.String(), "default scope", name)
		}
	})

	t.Run("SharedScope is the explicit opt-in for one scope for all", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{opts: httpmw.Options{Scope: httpmw.SharedScope("everyone")}})
		key := newKey()
		first := e.do(req{key: key, body: `{"a":1}`, noAuth: true})
		require.Equal(t, http.StatusCreated, first.status)
		again := e.do(req{key: key, body: `{"a":1}`, auth: "Bearer someone-else"})
		require.True(t, again.replayed(), "one scope for all: any caller gets the outcome")
		require.Equal(t, first.body, again.body)
		require.Panics(t, func() { httpmw.SharedScope("") })
	})

	t.Run("an empty scope is refused, never shared", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{opts: httpmw.Options{Logger: slog.New(slog.DiscardHandler),
			Scope: func(*http.Request) (string, error) { return "", nil }}})
		key := newKey()
		r := e.do(req{key: key, body: `{}`})
		require.Equal(t, http.StatusInternalServerError, r.status)
		require.Equal(t, "scope-required", r.problemType(t))
		require.Zero(t, e.app.runsOf(key))
	})

	t.Run("a scope error is logged, not sent to the client", func(t *testing.T) {
		var logged bytes.Buffer
		e := newEnv(t, b, mount, envConfig{opts: httpmw.Options{
			Logger: slog.New(slog.NewTextHandler(&logged, nil)),
			Scope:  func(*http.Request) (string, error) { return "", errors.New("accounts db: password=hunter2 refused") },
		}})
		r := e.do(req{key: newKey(), body: `{}`})
		require.Equal(t, http.StatusUnauthorized, r.status)
		require.Equal(t, "caller-unknown", r.problemType(t))
		require.NotContains(t, string(r.body), "hunter2")
		require.Contains(t, logged.String(), "hunter2")
	})

	t.Run("a Set-Cookie under a non-canonical header key is never replayed", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{})
		key := newKey()
		first := e.do(req{path: "/rawcookie", key: key})
		require.Equal(t, http.StatusCreated, first.status)
		again := e.do(req{path: "/rawcookie", key: key})
		require.True(t, again.replayed())
		require.Empty(t, again.header.Values("Set-Cookie"), "the cookie was replayed")
	})

	t.Run("trailers reach the first client", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{})
		key := newKey()
		hr := e.newRequest(req{path: "/trailer", key: key})
		resp, err := e.srv.Client().Do(hr)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, "body", string(body))
		require.Equal(t, "abc123", resp.Trailer.Get("X-Checksum"))
		require.Equal(t, "late", resp.Trailer.Get("X-Late"))
		again := e.do(req{path: "/trailer", key: key})
		require.True(t, again.replayed())
		require.Equal(t, "body", string(again.body))
	})

	t.Run("an invalid status code fails as net/http fails it: nothing is stored", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{opts: httpmw.Options{Logger: slog.New(slog.DiscardHandler)}})
		for _, code := range []string{"42", "1000"} {
			key := newKey()
			require.Panics(t, func() { e.serve(e.newRequest(req{path: "/badcode/" + code, key: key})) }, code)
			require.Panics(t, func() { e.serve(e.newRequest(req{path: "/badcode/" + code, key: key})) }, code)
			require.Equal(t, 2, e.app.runsOf(key), "code %s: the failed run was stored", code)
		}
	})

	t.Run("an oversize replay drops the headers that describe the original body", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{opts: httpmw.Options{MaxResponseBytes: 1024, OmitHeaders: []string{"X-Secret"}}})
		key := newKey()
		first := e.do(req{path: "/bigdescribed", key: key})
		require.Equal(t, http.StatusOK, first.status)
		require.Len(t, first.body, 64<<10)
		require.Equal(t, `"v1-big"`, first.header.Get("ETag"))
		again := e.do(req{path: "/bigdescribed", key: key})
		require.True(t, again.replayed())
		require.Equal(t, "response-too-large", again.problemType(t))
		for _, h := range []string{"ETag", "Content-Digest", "Content-Range", "Content-Encoding"} {
			require.Empty(t, again.header.Get(h), "%s describes a body the replay does not carry", h)
		}
		require.Equal(t, "kept", again.header.Get("X-Keep"))
	})

	t.Run("FailOpen runs unprotected only when Redis is unreachable", func(t *testing.T) {
		// Redis answers, with something the store does not understand.
		e := newEnv(t, b, mount, envConfig{client: garbage{b.scripter(t)},
			opts: httpmw.Options{FailOpen: true, Logger: slog.New(slog.DiscardHandler)}})
		key := newKey()
		r := e.do(req{key: key, body: `{}`})
		require.GreaterOrEqual(t, r.status, 500, "%s", r.body)
		require.Zero(t, e.app.runsOf(key), "ran unprotected although Redis answered")
	})
}

// garbage is a client whose scripts all answer "OK", as a Redis holding
// something else would.
type garbage struct{ redis.Scripter }

func (garbage) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetVal("OK")
	return cmd
}

func (g garbage) Eval(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return g.EvalSha(ctx, "", nil)
}
