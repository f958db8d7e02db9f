package main

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

// eachRedis runs f against miniredis and against a private redis-server.
func eachRedis(t *testing.T, f func(t *testing.T, store *redisstore.Store)) {
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
			store, err := redisstore.New(client(t), redisstore.Options{Lease: 5 * time.Second})
			require.NoError(t, err)
			f(t, store)
		})
	}
}

var testMessages = []message{
	{"m-1", "alice@example.com", "hello"},
	{"m-2", "bob@example.com", "hello"},
	{"m-3", "carol@example.com", "hello"}, // flaky: 503 on the first call
	{"m-4", "nobody", "hello"},            // invalid recipient
	{"m-5", "dave@example.com", "hello"},
}

func TestStormSendsOncePerMessage(t *testing.T) {
	eachRedis(t, func(t *testing.T, store *redisstore.Store) {
		var deliveries []message // three copies each, side by side, so consumers race on them
		for _, m := range testMessages {
			deliveries = append(deliveries, m, m, m)
		}
		api := newEmailAPI(20*time.Millisecond, "m-3")
		counts := consume(context.Background(), &consumer{store: store, send: api.send}, deliveries, 3, io.Discard)

		for _, m := range testMessages {
			wantCalls, wantSent := 1, 1
			switch m.ID {
			case "m-3":
				wantCalls = 2 // the 503, then the redelivery that sent it
			case "m-4":
				wantSent = 0
			}
			require.Equal(t, wantCalls, api.callsFor(m.ID), "API calls for %s", m.ID)
			require.Equal(t, wantSent, api.sentFor(m.ID), "emails for %s", m.ID)
		}
		require.Equal(t, 4, counts[sent])
		require.Equal(t, 1, counts[transient])
		require.Equal(t, 1, counts[failed])
		require.Zero(t, counts[mismatch]+counts[unavailable])
		acked := counts[sent] + counts[replayed] + counts[failed] + counts[failedReplayed]
		require.Equal(t, len(deliveries), acked, "every delivery acked exactly once")
		require.Equal(t, 2, counts[failedReplayed], "both duplicates of m-4 get the stored failure")
	})
}

func TestDuplicateInProgressIsNacked(t *testing.T) {
	eachRedis(t, func(t *testing.T, store *redisstore.Store) {
		started, release := make(chan struct{}), make(chan struct{})
		calls := 0
		c := &consumer{store: store, send: func(ctx context.Context, key string, m message) (string, error) {
			calls++ // only the first delivery gets here
			close(started)
			<-release
			return "email_1", nil
		}}
		m := message{"m-1", "alice@example.com", "hi"}
		first := make(chan outcome, 1)
		go func() { o, _ := c.handle(context.Background(), m); first <- o }()
		<-started

		o, _ := c.handle(context.Background(), m)
		require.Equal(t, inProgress, o)
		require.False(t, o.ack(), "a duplicate in progress is nacked for redelivery")

		close(release)
		require.Equal(t, sent, <-first)
		o, data := c.handle(context.Background(), m)
		require.Equal(t, replayed, o)
		require.Equal(t, "email_1", data)
		require.Equal(t, 1, calls)
	})
}

func TestTransientFailureReleasesKey(t *testing.T) {
	eachRedis(t, func(t *testing.T, store *redisstore.Store) {
		api := newEmailAPI(0, "m-1")
		c := &consumer{store: store, send: api.send}
		m := message{"m-1", "alice@example.com", "hi"}

		o, detail := c.handle(context.Background(), m)
		require.Equal(t, transient, o)
		require.Contains(t, detail, "503")
		_, err := store.Lookup(context.Background(), "email-sender", m.ID)
		require.ErrorIs(t, err, redisstore.ErrNotFound, "a transient failure leaves no record")

		o, _ = c.handle(context.Background(), m)
		require.Equal(t, sent, o, "the redelivery runs it")
		require.Equal(t, 1, api.sentFor(m.ID))
	})
}

func TestPermanentFailureIsStoredAndReplayed(t *testing.T) {
	eachRedis(t, func(t *testing.T, store *redisstore.Store) {
		api := newEmailAPI(0)
		c := &consumer{store: store, send: api.send}
		m := message{"m-1", "nobody", "hi"}

		o, detail := c.handle(context.Background(), m)
		require.Equal(t, failed, o)
		require.True(t, o.ack(), "a final failure is acked, not retried")
		require.Contains(t, detail, "400 invalid recipient")

		o, detail = c.handle(context.Background(), m)
		require.Equal(t, failedReplayed, o)
		require.True(t, o.ack())
		require.Contains(t, detail, "400 invalid recipient")
		require.Equal(t, 1, api.callsFor(m.ID))

		// What a duplicate gets from Do is a *FailedError with the first error's text.
		_, err := store.Do(context.Background(), redisstore.Request{Scope: "email-sender", Key: m.ID, Fingerprint: fingerprintOf(m)},
			func(context.Context, *redisstore.Lease) ([]byte, error) { panic("must not run") })
		var fe *redisstore.FailedError
		require.True(t, errors.As(err, &fe))
		require.Equal(t, "email API: 400 invalid recipient nobody", fe.Message)
	})
}

func TestReusedIDWithOtherPayloadIsMismatch(t *testing.T) {
	eachRedis(t, func(t *testing.T, store *redisstore.Store) {
		c := &consumer{store: store, send: newEmailAPI(0).send}
		o, _ := c.handle(context.Background(), message{"m-1", "alice@example.com", "hi"})
		require.Equal(t, sent, o)
		o, _ = c.handle(context.Background(), message{"m-1", "alice@example.com", "something else"})
		require.Equal(t, mismatch, o)
	})
}
