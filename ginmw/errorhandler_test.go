package ginmw_test

// Regression tests for Gin's error pattern on Gin itself: Gin's error pattern
// (c.Error, rendered by the app's error middleware) stores a deterministic
// 4xx. Each failed before ErrorHandler was run by the middleware.

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/ginmw"
	"github.com/idemkey/idemkey/redisstore"
)

var errCardDeclined = errors.New("card declined")

// render answers the last error: 402 for a declined card, else 500.
func render(c *gin.Context) {
	err := c.Errors.Last()
	if err == nil || c.Writer.Written() {
		return
	}
	status := http.StatusInternalServerError
	if errors.Is(err, errCardDeclined) {
		status = http.StatusPaymentRequired
	}
	c.JSON(status, gin.H{"error": err.Error()})
}

// The two usual styles of Gin error middleware.
var renderers = map[string]gin.HandlerFunc{
	// calls c.Next() first, then renders: registered with r.Use
	"next then render": func(c *gin.Context) {
		c.Next()
		render(c)
	},
	// renders only
	"render only": render,
}

// TestGinErrorHandlerStoresDeclines: a handler that calls c.Error with a
// declined card and returns gets the 402 its ErrorHandler renders stored:
// retries are replayed, the provider is called once. An error it renders as
// 5xx releases the key.
func TestGinErrorHandlerStoresDeclines(t *testing.T) {
	for name, renderer := range renderers {
		for _, global := range []bool{false, true} {
			where := "on the route only"
			if global {
				where = "and globally"
			}
			t.Run(name+" "+where, func(t *testing.T) {
				stores(t, redisstore.Options{}, func(t *testing.T, s *redisstore.Store) {
					var charges, runs atomic.Int64
					r := gin.New()
					if global {
						r.Use(renderers["next then render"]) // also the app's global renderer
					}
					opts := quiet()
					opts.ErrorHandler = renderer
					r.POST("/v1/charges", ginmw.New(s, opts), func(c *gin.Context) {
						runs.Add(1)
						if strings.Contains(ginmw.Key(c), "timeout") {
							_ = c.Error(errors.New("provider timeout"))
							return
						}
						charges.Add(1) // the provider declines
						_ = c.Error(errCardDeclined)
					})
					first := send(r, "k-decline", "", `{}`)
					require.Equal(t, http.StatusPaymentRequired, first.Code, "%s", first.Body)
					require.JSONEq(t, `{"error":"card declined"}`, first.Body.String())
					again := send(r, "k-decline", "", `{}`)
					require.Equal(t, http.StatusPaymentRequired, again.Code)
					require.Equal(t, "true", again.Header().Get("Idempotent-Replayed"), "the decline was not stored")
					require.Equal(t, first.Body.String(), again.Body.String())
					require.EqualValues(t, 1, charges.Load(), "the provider was called again")

					for range 2 {
						w := send(r, "k-timeout", "", `{}`)
						require.Equal(t, http.StatusInternalServerError, w.Code)
						require.Empty(t, w.Header().Get("Idempotent-Replayed"))
					}
					require.EqualValues(t, 3, runs.Load(), "a 5xx is released: every retry runs")
				})
			})
		}
	}
}

// TestGinErrorsWithoutErrorHandlerAreLogged: without ErrorHandler, a
// handler that leaves c.Errors and writes nothing is released (the error
// middleware outside answers), and the log names the option, once.
func TestGinErrorsWithoutErrorHandlerAreLogged(t *testing.T) {
	stores(t, redisstore.Options{}, func(t *testing.T, s *redisstore.Store) {
		var logged bytes.Buffer
		r := gin.New()
		r.Use(renderers["next then render"])
		r.POST("/v1/charges", ginmw.New(s, ginmw.Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))}), func(c *gin.Context) {
			_ = c.Error(errCardDeclined)
		})
		for range 3 {
			w := send(r, "k1", "", `{}`)
			require.Equal(t, http.StatusPaymentRequired, w.Code)
			require.Empty(t, w.Header().Get("Idempotent-Replayed"), "stored without ErrorHandler")
		}
		require.Equal(t, 1, strings.Count(logged.String(), "ErrorHandler"), "%s", &logged)
	})
}

// TestGinBeforeAuthIsLogged: the middleware mounted before the app's auth
// middleware answers every logged-in user 401; the log names the likely
// cause, once.
func TestGinBeforeAuthIsLogged(t *testing.T) {
	stores(t, redisstore.Options{}, func(t *testing.T, s *redisstore.Store) {
		var logged bytes.Buffer
		auth := func(c *gin.Context) { c.Set("user", c.GetHeader("X-User")) }
		r := gin.New()
		r.POST("/v1/charges", ginmw.New(s, ginmw.Options{
			Logger: slog.New(slog.NewTextHandler(&logged, nil)),
			Scope: func(c *gin.Context) (string, error) {
				if u := c.GetString("user"); u != "" {
					return u, nil
				}
				return "", errors.New("not logged in")
			},
		}), auth, func(c *gin.Context) { c.Status(http.StatusCreated) })
		for _, key := range []string{"k1", "k2", "k3"} {
			require.Equal(t, http.StatusUnauthorized, send(r, key, "alice", `{}`).Code)
		}
		require.Equal(t, 1, strings.Count(logged.String(), "before your authentication"), "%s", &logged)
	})
}
