package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

var secrets = map[string][]byte{"acme": []byte("acme-secret"), "globex": []byte("globex-secret")}

// receiverEnv is a receiver on a loopback test server.
type receiverEnv struct {
	orders *orders
	redis  *redis.Client
	srv    *httptest.Server
}

func (e *receiverEnv) sender(name string) *webhookSender {
	return &webhookSender{url: e.srv.URL + "/webhooks/" + name, secret: secrets[name]}
}

// eachRedis runs f with a receiver on miniredis and on a private redis-server.
func eachRedis(t *testing.T, f func(t *testing.T, e *receiverEnv)) {
	backends := map[string]func(t *testing.T) *redis.Client{
		"miniredis": func(t *testing.T) *redis.Client {
			c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
		"redis-server": func(t *testing.T) *redis.Client { return redistest.Start(t).Client(t) },
	}
	for name, client := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := &receiverEnv{orders: newOrders(20 * time.Millisecond), redis: client(t)}
			store, err := newStore(e.redis)
			require.NoError(t, err)
			e.srv = httptest.NewServer(newReceiver(store, secrets, e.orders))
			t.Cleanup(e.srv.Close)
			f(t, e)
		})
	}
}

func TestSelftest(t *testing.T) {
	eachRedis(t, func(t *testing.T, e *receiverEnv) {
		var out strings.Builder
		require.NoError(t, selftest(context.Background(), e.sender("acme"), e.orders, &out), out.String())
		require.Contains(t, out.String(), "ok: every event applied once")
	})
}

func TestSameEventIDFromTwoSendersIsTwoEvents(t *testing.T) {
	eachRedis(t, func(t *testing.T, e *receiverEnv) {
		ctx := context.Background()
		r, err := e.sender("acme").deliver(ctx, "msg_1", paymentEvent("ord_a", 100))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, r.Status)
		r, err = e.sender("globex").deliver(ctx, "msg_1", paymentEvent("ord_g", 100))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, r.Status)
		require.False(t, r.Replayed, "scopes keep the senders' event IDs apart")
		require.Equal(t, 1, e.orders.appliedTo("ord_a"))
		require.Equal(t, 1, e.orders.appliedTo("ord_g"))
	})
}

func TestEventIDReusedForAnotherPayloadIs422(t *testing.T) {
	eachRedis(t, func(t *testing.T, e *receiverEnv) {
		ctx := context.Background()
		_, err := e.sender("acme").deliver(ctx, "msg_1", paymentEvent("ord_1", 100))
		require.NoError(t, err)
		r, err := e.sender("acme").deliver(ctx, "msg_1", paymentEvent("ord_1", 999))
		require.NoError(t, err)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status)
		require.Equal(t, 1, e.orders.appliedTo("ord_1"))
	})
}

func TestUnauthenticatedDeliveriesNeverReachRedis(t *testing.T) {
	eachRedis(t, func(t *testing.T, e *receiverEnv) {
		body := paymentEvent("ord_1", 100)
		stale := time.Now().Add(-time.Hour).Unix()
		cases := map[string]struct {
			sender string
			header func(h http.Header)
			want   int
		}{
			"wrong secret": {"acme", func(h http.Header) {
				h.Set("Webhook-Signature", sign([]byte("x"), "msg_1", h.Get("Webhook-Timestamp"), []byte(body)))
			}, 401},
			"no signature": {"acme", func(h http.Header) { h.Del("Webhook-Signature") }, 401},
			"no id":        {"acme", func(h http.Header) { h.Del("Webhook-Id") }, 401},
			"other id":     {"acme", func(h http.Header) { h.Set("Webhook-Id", "msg_2") }, 401},
			"stale": {"acme", func(h http.Header) {
				ts := itoa(stale)
				h.Set("Webhook-Timestamp", ts)
				h.Set("Webhook-Signature", sign(secrets["acme"], "msg_1", ts, []byte(body)))
			}, 401},
			"unknown sender": {"initech", func(http.Header) {}, 404},
		}
		for name, c := range cases {
			ts := itoa(time.Now().Unix())
			req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/webhooks/"+c.sender, strings.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Webhook-Id", "msg_1")
			req.Header.Set("Webhook-Timestamp", ts)
			req.Header.Set("Webhook-Signature", sign(secrets["acme"], "msg_1", ts, []byte(body)))
			c.header(req.Header)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, c.want, resp.StatusCode, name)
		}
		n, err := e.redis.DBSize(context.Background()).Result()
		require.NoError(t, err)
		require.Zero(t, n, "nothing unauthenticated reached Redis")
		require.Zero(t, e.orders.appliedTo("ord_1"))
	})
}

func TestCheckSignatureAcceptsAnyOfSeveral(t *testing.T) {
	now := time.Unix(time.Now().Unix(), 0) // whole seconds, as webhook-timestamp has them
	ts := itoa(now.Unix())
	body := []byte(`{}`)
	h := http.Header{}
	h.Set("Webhook-Id", "msg_1")
	h.Set("Webhook-Timestamp", ts)
	h.Set("Webhook-Signature", sign([]byte("old"), "msg_1", ts, body)+" "+sign([]byte("new"), "msg_1", ts, body))
	require.NoError(t, checkSignature([]byte("new"), h, body, now), "secret rotation sends both")
	require.NoError(t, checkSignature([]byte("old"), h, body, now.Add(tolerance)))
	require.Error(t, checkSignature([]byte("new"), h, body, now.Add(tolerance+time.Second)))
	require.Error(t, checkSignature([]byte("new"), h, []byte(`{"x":1}`), now), "body is signed")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
