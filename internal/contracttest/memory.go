package contracttest

// Bytes per record: compressed stored responses, dictionaries
// and their rotation, records written by the previous release, and the
// tombstone that outlives an outcome.

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/internal/corpus"
	"github.com/idemkey/idemkey/internal/httpcore"
	"github.com/idemkey/idemkey/internal/zdict"
	"github.com/idemkey/idemkey/redisstore"
)

// memoryDicts are two dictionaries trained on payment bodies, trained once.
var memoryDicts = sync.OnceValues(func() ([][]byte, error) {
	a, err := zdict.Train(corpus.Payment.Bodies(50, 200), zdict.Options{ID: 41001, Size: 4 << 10})
	if err != nil {
		return nil, err
	}
	b, err := zdict.Train(corpus.Payment.Bodies(51, 200), zdict.Options{ID: 41002, Size: 4 << 10})
	return [][]byte{a, b}, err
})

// payReq is a payment request.
const payReq = `{"amount": 1200, "currency": "EUR", "customer": "cus_1"}`

func runMemory(t *testing.T, mount Mount, b backend) {
	dicts, err := memoryDicts()
	require.NoError(t, err)
	payments := corpus.Payment.Bodies(52, 20)
	quiet := slog.New(slog.DiscardHandler)

	t.Run("compressed responses replay byte for byte, with a dictionary or without", func(t *testing.T) {
		codec, err := httpcore.NewResponseCodec(httpcore.Compression{Dictionaries: dicts})
		require.NoError(t, err)
		scope, err := httpcore.DefaultScope(httptestRequest())
		require.NoError(t, err)
		for name, opts := range map[string]httpmw.Options{
			"zstd": {Compress: true}, "zstd+dict": {Dictionaries: dicts}, "raw": {},
		} {
			e := newEnv(t, b, mount, envConfig{opts: opts})
			for i, body := range payments[:5] {
				key := newKey()
				first := e.do(req{key: key, body: string(body)})
				require.Equal(t, http.StatusCreated, first.status, name)
				again := e.do(req{key: key, body: string(body)})
				require.True(t, again.replayed(), name)
				require.Equal(t, first.body, again.body, "%s #%d", name, i)
				for _, h := range []string{"Location", "Content-Type"} {
					require.Equal(t, first.header.Get(h), again.header.Get(h), name)
				}
				require.Equal(t, []string{"one", "two"}, again.header.Values("X-Multi"), name)
				require.Equal(t, 1, e.app.runsOf(key), name)

				rec, err := e.store.Lookup(context.Background(), scope, key)
				require.NoError(t, err)
				stored, err := codec.Decode(rec.Response.Code, rec.Response.Body)
				require.NoError(t, err)
				require.Equal(t, name != "raw", stored.Compressed, name)
				require.Equal(t, first.body, stored.Body, name)
				if name == "zstd+dict" {
					require.Less(t, len(rec.Response.Body), len(first.body)/2, "a dictionary more than halves a payment")
				}
			}
		}
	})

	t.Run("a replaced dictionary kept after the new one still replays; a dropped one fails closed", func(t *testing.T) {
		store := redisstore.Options{}
		old := newEnv(t, b, mount, envConfig{opts: httpmw.Options{Dictionaries: dicts[:1]}, store: store})
		key := newKey()
		first := old.do(req{key: key, body: string(payments[6])})
		require.Equal(t, http.StatusCreated, first.status)

		rotated := newEnv(t, b, mount, envConfig{opts: httpmw.Options{Dictionaries: [][]byte{dicts[1], dicts[0]}}, app: old.app})
		again := rotated.do(req{key: key, body: string(payments[6])})
		require.True(t, again.replayed())
		require.Equal(t, first.body, again.body)

		dropped := newEnv(t, b, mount, envConfig{opts: httpmw.Options{Dictionaries: dicts[1:], Logger: quiet}, app: old.app})
		r := dropped.do(req{key: key, body: string(payments[6])})
		require.Equal(t, http.StatusInternalServerError, r.status)
		require.Equal(t, "stored-response-unreadable", r.problemType(t))
		require.Equal(t, 1, old.app.runsOf(key), "never runs again, even when it cannot replay")
	})

	t.Run("a record written by the previous release (version 1 response) replays", func(t *testing.T) {
		e := newEnv(t, b, mount, envConfig{opts: httpmw.Options{Dictionaries: dicts}})
		ctx := context.Background()
		// The fingerprint of the request, as the middleware stores it.
		probe := newKey()
		require.Equal(t, http.StatusCreated, e.do(req{key: probe, body: payReq}).status)
		scope, err := httpcore.DefaultScope(e.newRequest(req{}))
		require.NoError(t, err)
		rec, err := e.store.Lookup(ctx, scope, probe)
		require.NoError(t, err)

		// The record of another key, completed as the previous release did.
		key := newKey()
		header := http.Header{"Content-Type": {"application/json"}, "Location": {"/payments/pay_v1"}, "X-Multi": {"one", "two"}}
		body := []byte(`{"id":"pay_v1","written_by":"version 1"}`)
		cl, err := e.store.Claim(ctx, redisstore.Request{Scope: scope, Key: key, Fingerprint: rec.Fingerprint})
		require.NoError(t, err)
		require.NoError(t, cl.Lease.Complete(ctx, redisstore.Response{Code: http.StatusCreated, Body: appendV1Response(header, body)}))

		r := e.do(req{key: key, body: payReq})
		require.Equal(t, http.StatusCreated, r.status)
		require.True(t, r.replayed())
		require.Equal(t, body, r.body)
		require.Equal(t, "/payments/pay_v1", r.header.Get("Location"))
		require.Equal(t, []string{"one", "two"}, r.header.Values("X-Multi"))
		require.Zero(t, e.app.runsOf(key))

		// An outcome no version wrote fails closed: no panic, no replay, no run.
		bad := newKey()
		cl, err = e.store.Claim(ctx, redisstore.Request{Scope: scope, Key: bad, Fingerprint: rec.Fingerprint})
		require.NoError(t, err)
		require.NoError(t, cl.Lease.Complete(ctx, redisstore.Response{Code: http.StatusCreated, Body: []byte{0x7f, 1, 2, 3}}))
		quietEnv := newEnv(t, b, mount, envConfig{opts: httpmw.Options{Logger: quiet}, app: e.app})
		r = quietEnv.do(req{key: bad, body: payReq})
		require.Equal(t, http.StatusInternalServerError, r.status)
		require.Equal(t, "stored-response-unreadable", r.problemType(t))
		require.Zero(t, e.app.runsOf(bad))
	})

	t.Run("after the outcome expires, the tombstone answers its status with response-expired, and 422 to another request", func(t *testing.T) {
		const retention = time.Second
		e := newEnv(t, b, mount, envConfig{store: redisstore.Options{Retention: retention, Lease: 200 * time.Millisecond,
			TombstoneRetention: time.Minute}, opts: httpmw.Options{Compress: true}})
		key := newKey()
		first := e.do(req{key: key, body: payReq})
		require.Equal(t, http.StatusCreated, first.status)
		require.False(t, first.replayed())

		// Wait until the outcome is gone: retries replay it until then.
		if b.mr != nil {
			b.mr.FastForward(2 * retention) // miniredis ages TTLs only when told
		}
		var r *response
		deadline := time.Now().Add(15 * time.Second)
		for {
			r = e.do(req{key: key, body: payReq})
			if !bytes.Equal(r.body, first.body) || time.Now().After(deadline) {
				break
			}
			require.True(t, r.replayed())
			time.Sleep(50 * time.Millisecond)
		}
		for range 2 {
			require.Equal(t, http.StatusCreated, r.status, "the original status: %s", r.body)
			require.True(t, r.replayed(), "an expired outcome is still a replay: it never runs again")
			require.Equal(t, "response-expired", r.problemType(t))
			r = e.do(req{key: key, body: payReq})
		}
		other := e.do(req{key: key, body: `{"amount": 9999, "currency": "EUR"}`})
		require.Equal(t, http.StatusUnprocessableEntity, other.status)
		require.Equal(t, "key-reused", other.problemType(t))
		require.Equal(t, 1, e.app.runsOf(key))
	})
}

// httptestRequest is a request with the credential the suite's requests
// carry, for their scope.
func httptestRequest() *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Authorization", "Bearer alice")
	return r
}

// appendV1Response encodes a response as the previous release stored it
// (version 1: version and flags bytes, then length-prefixed names and
// values, then the body), with the names sorted.
func appendV1Response(h http.Header, body []byte) []byte {
	names := make([]string, 0, len(h))
	n := 0
	for k, vs := range h {
		names = append(names, k)
		n += len(vs)
	}
	sort.Strings(names)
	b := binary.AppendUvarint([]byte{1, 0}, uint64(n))
	for _, k := range names {
		for _, v := range h[k] {
			b = binary.AppendUvarint(b, uint64(len(k)))
			b = append(b, k...)
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return append(b, body...)
}
