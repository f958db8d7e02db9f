package ginmw_test

// Regression tests for exactly once on every path and for safe defaults, on
// Gin itself; each failed before its fix.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/ginmw"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

// stores runs f on a store over a private redis-server and over miniredis.
func stores(t *testing.T, opts redisstore.Options, f func(t *testing.T, s *redisstore.Store)) {
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		s, err := redisstore.New(srv.Client(t), opts)
		require.NoError(t, err)
		f(t, s)
	})
	t.Run("miniredis", func(t *testing.T) {
		mr := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		s, err := redisstore.New(c, opts)
		require.NoError(t, err)
		f(t, s)
	})
}

func send(h http.Handler, key, user, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer sk_test")
	if user != "" {
		r.Header.Del("Authorization")
		r.Header.Set("X-User", user)
	}
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func quiet() ginmw.Options { return ginmw.Options{Logger: slog.New(slog.DiscardHandler)} }

// renderErrors is the common Gin error middleware: handlers call c.Error and
// return; it writes the 500 after c.Next.
func renderErrors(c *gin.Context) {
	c.Next()
	if len(c.Errors) > 0 && !c.Writer.Written() {
		c.JSON(http.StatusInternalServerError, gin.H{"error": c.Errors.Last().Error()})
	}
}

// TestGinErrorsAreNotStored: a handler that records an error with c.Error
// and writes nothing has not answered: the key is released, and the 500 the
// error middleware writes is what the client gets, never a stored 200.
func TestGinErrorsAreNotStored(t *testing.T) {
	stores(t, redisstore.Options{}, func(t *testing.T, s *redisstore.Store) {
		var runs atomic.Int64
		r := gin.New()
		r.Use(renderErrors)
		r.POST("/v1/charges", ginmw.New(s, quiet()), func(c *gin.Context) {
			if runs.Add(1) == 1 {
				_ = c.Error(errors.New("provider timeout"))
				return
			}
			c.JSON(http.StatusCreated, gin.H{"charge": "ch_1"})
		})
		first := send(r, "k1", "", `{}`)
		require.Equal(t, http.StatusInternalServerError, first.Code)
		require.Contains(t, first.Body.String(), "provider timeout")
		second := send(r, "k1", "", `{}`)
		require.Equal(t, http.StatusCreated, second.Code, "a 200 with no body was stored: %s", second.Body)
		require.Empty(t, second.Header().Get("Idempotent-Replayed"))
		third := send(r, "k1", "", `{}`)
		require.Equal(t, http.StatusCreated, third.Code)
		require.Equal(t, "true", third.Header().Get("Idempotent-Replayed"))
		require.EqualValues(t, 2, runs.Load())
	})
}

// TestGinStoredStatusIsFinal: once the outcome is stored, no outer
// middleware can change what the client sees.
func TestGinStoredStatusIsFinal(t *testing.T) {
	stores(t, redisstore.Options{}, func(t *testing.T, s *redisstore.Store) {
		r := gin.New()
		r.Use(func(c *gin.Context) {
			c.Next()
			c.JSON(http.StatusInternalServerError, gin.H{"late": "rewrite"}) // a careless outer middleware
		})
		r.POST("/v1/charges", ginmw.New(s, quiet()), func(c *gin.Context) {
			c.Status(http.StatusNoContent)
		})
		first := send(r, "k1", "", `{}`)
		require.Equal(t, http.StatusNoContent, first.Code)
		require.Empty(t, first.Body.String())
		again := send(r, "k1", "", `{}`)
		require.Equal(t, http.StatusNoContent, again.Code)
		require.Empty(t, again.Body.String())
		require.Equal(t, "true", again.Header().Get("Idempotent-Replayed"))
	})
}

// TestGinRecovery: a panic releases the key, with gin.Recovery outside the
// middleware or inside it.
func TestGinRecovery(t *testing.T) {
	for _, where := range []string{"outside", "inside"} {
		t.Run(where, func(t *testing.T) {
			stores(t, redisstore.Options{}, func(t *testing.T, s *redisstore.Store) {
				var runs atomic.Int64
				handler := func(c *gin.Context) {
					if runs.Add(1) == 1 {
						panic("boom")
					}
					c.JSON(http.StatusCreated, gin.H{"ok": true})
				}
				r := gin.New()
				if where == "outside" {
					r.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) { c.AbortWithStatus(http.StatusInternalServerError) }))
					r.POST("/v1/charges", ginmw.New(s, quiet()), handler)
				} else {
					r.POST("/v1/charges", ginmw.New(s, quiet()),
						gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) { c.AbortWithStatus(http.StatusInternalServerError) }), handler)
				}
				require.Equal(t, http.StatusInternalServerError, send(r, "k1", "", `{}`).Code)
				require.Equal(t, http.StatusCreated, send(r, "k1", "", `{}`).Code)
				again := send(r, "k1", "", `{}`)
				require.Equal(t, http.StatusCreated, again.Code)
				require.Equal(t, "true", again.Header().Get("Idempotent-Replayed"))
				require.EqualValues(t, 2, runs.Load())
			})
		})
	}
}

// TestGinCustomAuthUsersStayApart: an app with its own authentication (the
// user in the Gin context, no Authorization header) under the zero-value
// options: Bob sending Alice's key and body never gets Alice's charge.
func TestGinCustomAuthUsersStayApart(t *testing.T) {
	stores(t, redisstore.Options{}, func(t *testing.T, s *redisstore.Store) {
		r := gin.New()
		r.Use(func(c *gin.Context) { // the app's own auth
			user := c.GetHeader("X-User")
			if user == "" {
				c.AbortWithStatus(http.StatusUnauthorized)
				return
			}
			c.Set("user", user)
		})
		var charges atomic.Int64
		r.POST("/v1/charges", ginmw.New(s, quiet()), func(c *gin.Context) {
			n := charges.Add(1)
			c.JSON(http.StatusCreated, gin.H{"charge": n, "user": c.GetString("user")})
		})
		alice := send(r, "shared-key", "alice", `{"amount":1}`)
		bob := send(r, "shared-key", "bob", `{"amount":1}`)
		require.NotContains(t, bob.Body.String(), `"user":"alice"`, "bob got alice's charge")
		if alice.Code == http.StatusCreated {
			require.NotEqual(t, alice.Body.String(), bob.Body.String())
		}
	})
}

// TestGinDownstreamContext: the context a handler passes to the provider
// (c.Request.Context(), or c itself with ContextWithFallback) is cancelled
// at MaxDuration, and not when the client gives up: its cause is
// ErrMaxDuration, not the client's cancel.
func TestGinDownstreamContext(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		stores(t, redisstore.Options{MaxDuration: 300 * time.Millisecond}, func(t *testing.T, s *redisstore.Store) {
			r := gin.New()
			r.ContextWithFallback = fallback
			cause := make(chan error, 1)
			r.POST("/v1/charges", ginmw.New(s, quiet()), func(c *gin.Context) {
				var ctx context.Context = c.Request.Context()
				if fallback {
					ctx = c
				}
				select {
				case <-ctx.Done(): // the provider call gives up
					cause <- context.Cause(ctx)
				case <-time.After(time.Minute):
					cause <- errors.New("the provider call was not cancelled")
				}
				c.Status(http.StatusServiceUnavailable)
			})
			send(r, "k1", "", `{}`)
			require.ErrorIs(t, <-cause, redisstore.ErrMaxDuration, "the provider call was not cancelled at MaxDuration")
		})
	}
}
