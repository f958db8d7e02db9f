package ginmw_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/ginmw"
	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/redisstore"
)

func newStore(t *testing.T) *redisstore.Store {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redisstore.New(c, redisstore.Options{})
	require.NoError(t, err)
	return s
}

// TestGinCapture runs what Gin handlers do to a response through the
// middleware twice: the replay must match the original.
func TestGinCapture(t *testing.T) {
	tests := []struct {
		name    string
		handler gin.HandlerFunc
		check   func(t *testing.T, r *httptest.ResponseRecorder)
	}{
		{"c.JSON", func(c *gin.Context) {
			c.Header("Location", "/v1/things/1")
			c.JSON(http.StatusCreated, gin.H{"id": 1})
		}, func(t *testing.T, r *httptest.ResponseRecorder) {
			require.Equal(t, http.StatusCreated, r.Code)
			require.JSONEq(t, `{"id":1}`, r.Body.String())
			require.Equal(t, "/v1/things/1", r.Header().Get("Location"))
			require.Equal(t, "application/json; charset=utf-8", r.Header().Get("Content-Type"))
		}},
		{"c.Data", func(c *gin.Context) {
			c.Data(http.StatusAccepted, "application/octet-stream", []byte{0, 1, 2, 0xff})
		}, func(t *testing.T, r *httptest.ResponseRecorder) {
			require.Equal(t, http.StatusAccepted, r.Code)
			require.Equal(t, []byte{0, 1, 2, 0xff}, r.Body.Bytes())
			require.Equal(t, "application/octet-stream", r.Header().Get("Content-Type"))
		}},
		{"c.Status without a body", func(c *gin.Context) {
			c.Status(http.StatusNoContent)
			c.Header("X-After-Status", "kept") // Gin sends headers set before the first byte
		}, func(t *testing.T, r *httptest.ResponseRecorder) {
			require.Equal(t, http.StatusNoContent, r.Code)
			require.Empty(t, r.Body.Bytes())
			require.Equal(t, "kept", r.Header().Get("X-After-Status"))
		}},
		{"c.Redirect", func(c *gin.Context) {
			c.Redirect(http.StatusSeeOther, "/v1/things/2")
		}, func(t *testing.T, r *httptest.ResponseRecorder) {
			require.Equal(t, http.StatusSeeOther, r.Code)
			require.Equal(t, "/v1/things/2", r.Header().Get("Location"))
		}},
		{"headers set after the body are not sent", func(c *gin.Context) {
			c.Header("X-Before", "1")
			c.String(http.StatusOK, "hello")
			c.Header("X-After-Body", "dropped")
		}, func(t *testing.T, r *httptest.ResponseRecorder) {
			require.Equal(t, http.StatusOK, r.Code)
			require.Equal(t, "hello", r.Body.String())
			require.Equal(t, "1", r.Header().Get("X-Before"))
			require.Empty(t, r.Header().Get("X-After-Body"))
		}},
		{"status changed before the body", func(c *gin.Context) {
			c.Status(http.StatusOK)
			c.Status(http.StatusAccepted)
			c.Writer.WriteString("queued")
		}, func(t *testing.T, r *httptest.ResponseRecorder) {
			require.Equal(t, http.StatusAccepted, r.Code)
			require.Equal(t, "queued", r.Body.String())
		}},
		{"AbortWithStatusJSON", func(c *gin.Context) {
			c.AbortWithStatusJSON(http.StatusPaymentRequired, gin.H{"error": "card_declined"})
		}, func(t *testing.T, r *httptest.ResponseRecorder) {
			require.Equal(t, http.StatusPaymentRequired, r.Code)
			require.JSONEq(t, `{"error":"card_declined"}`, r.Body.String())
		}},
		{"nothing written", func(c *gin.Context) {}, func(t *testing.T, r *httptest.ResponseRecorder) {
			require.Equal(t, http.StatusOK, r.Code)
			require.Empty(t, r.Body.Bytes())
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var runs atomic.Int32
			r := gin.New()
			r.POST("/x", ginmw.New(newStore(t), ginmw.Options{}), func(c *gin.Context) {
				runs.Add(1)
				tt.handler(c)
			})
			send := func() *httptest.ResponseRecorder {
				req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(`{}`))
				req.Header.Set("Idempotency-Key", "k1")
				req.Header.Set("Authorization", "Bearer sk_test")
				req.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				r.ServeHTTP(w, req)
				return w
			}
			first := send()
			tt.check(t, first)
			require.Empty(t, first.Header().Get("Idempotent-Replayed"))
			again := send()
			tt.check(t, again)
			require.Equal(t, "true", again.Header().Get("Idempotent-Replayed"))
			require.Equal(t, first.Body.Bytes(), again.Body.Bytes())
			require.EqualValues(t, 1, runs.Load())
		})
	}
}

// TestGinHelpers checks what handlers get from the context.
func TestGinHelpers(t *testing.T) {
	store := newStore(t)
	r := gin.New()
	var got struct {
		key, derived, point string
		attempt             int
		checkpointErr       error
	}
	r.POST("/x", ginmw.New(store, ginmw.Options{}), func(c *gin.Context) {
		got.key = ginmw.Key(c)
		got.derived = ginmw.DerivedKey(c, "charge")
		got.point, _ = ginmw.RecoveryPoint(c)
		got.attempt = ginmw.Attempt(c)
		got.checkpointErr = ginmw.Checkpoint(c, "charged", []byte("ch_1"))
		c.Status(http.StatusServiceUnavailable) // not stored: the checkpoint survives for the retry
	})
	r.GET("/free", func(c *gin.Context) {
		require.Empty(t, ginmw.Key(c))
		require.Zero(t, ginmw.Attempt(c))
		require.Empty(t, ginmw.DerivedKey(c, "x"))
		require.ErrorIs(t, ginmw.Checkpoint(c, "p", nil), httpmw.ErrNotProtected)
		c.Status(http.StatusOK)
	})
	send := func() {
		req := httptest.NewRequest(http.MethodPost, "/x", nil)
		req.Header.Set("Idempotency-Key", "k-42")
		req.Header.Set("Authorization", "Bearer sk_test")
		r.ServeHTTP(httptest.NewRecorder(), req)
	}
	send()
	require.Equal(t, "k-42", got.key)
	require.Len(t, got.derived, 32)
	require.Empty(t, got.point)
	require.Equal(t, 1, got.attempt)
	require.NoError(t, got.checkpointErr)
	first := got.derived
	send()
	require.Equal(t, "charged", got.point, "the retry resumes from the checkpoint")
	require.Equal(t, 2, got.attempt)
	require.Equal(t, first, got.derived)

	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/free", nil))
	require.Equal(t, http.StatusOK, w.Code)
}
