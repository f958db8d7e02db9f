package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/corpus"
	"github.com/idemkey/idemkey/internal/httpcore"
	"github.com/idemkey/idemkey/internal/zdict"
	"github.com/idemkey/idemkey/redisstore"
	"github.com/idemkey/idemkey/redisstore/spec"
)

// jsonOf parses JSON with exact numbers.
func jsonOf(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	require.NoError(t, d.Decode(&v), "%s", b)
	return v
}

// inspect --raw shows each record as Redis holds it, by the names of
// docs/spec.md: a started record's token, threshold and created time, a
// completed one's outcome read as a stored HTTP response (its dictionary
// ID), its tombstone; a value of a later version or of idemkey 0.1 as what
// it is. The JSON is what package spec and httpcore decode.
func TestInspectRawShowsSpecFields(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, redisstore.Options{TombstoneRetention: time.Hour})
	require.NoError(t, err)
	ctx := context.Background()

	dict, err := zdict.Train(corpus.Payment.Bodies(100, 300), zdict.Options{ID: 40078, Size: 8 << 10})
	require.NoError(t, err)
	dictFile := filepath.Join(t.TempDir(), "payments.zstd")
	require.NoError(t, os.WriteFile(dictFile, dict, 0o600))
	codec, err := httpcore.NewResponseCodec(httpcore.Compression{Dictionaries: [][]byte{dict}})
	require.NoError(t, err)

	c, err := store.Claim(ctx, redisstore.Request{Scope: "s", Key: "running", Label: "POST /v1/\x1b[2Jpayments"})
	require.NoError(t, err)
	require.NoError(t, c.Lease.Checkpoint(ctx, "charged", []byte("ch_\xff")))
	c, err = store.Claim(ctx, redisstore.Request{Scope: "s", Key: "done"})
	require.NoError(t, err)
	body := corpus.Payment.Bodies(9, 1)[0]
	require.NoError(t, c.Lease.Complete(ctx, redisstore.Response{Code: 201,
		Body: codec.Append(nil, http.Header{"Location": {"/v1/payments/pay_9"}}, body, false)}))
	require.NoError(t, rdb.Set(ctx, store.RecordName("s", "later"), "T-a record of a later major version", 0).Err())
	require.NoError(t, rdb.HSet(ctx, store.RecordName("s", "old"), "state", "completed", "fp", "f", "att", 1, "code", 200, "resp", "old").Err())

	t.Run("started", func(t *testing.T) {
		r := runBin(t, 30*time.Second, "inspect", "--raw", "--redis", mr.Addr(), "--scope", "s", "running")
		require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		requireTerminalSafe(t, r.stdout)
		for _, want := range []string{"spec            " + redisstore.SpecVersion, "kind            S", "state           started (lease ",
			"flags           \"-\"", "token           ", "attempt         1", "threshold       86390000",
			`recovery_point  "charged"`, `recovery_data   "ch_\xff"`, `label           "POST /v1/\x1b[2Jpayments"`, "created         1", "tombstone       none"} {
			require.Contains(t, r.stdout, want)
		}

		r = runBin(t, 30*time.Second, "inspect", "--raw", "--json", "--redis", mr.Addr(), "--scope", "s", "running")
		require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		got := jsonOf(t, []byte(r.stdout)).(map[string]any)
		v, err := rdb.Get(ctx, store.RecordName("s", "running")).Bytes()
		require.NoError(t, err)
		rec, err := spec.ParseRecord(v)
		require.NoError(t, err)
		want, err := rec.MarshalJSON()
		require.NoError(t, err)
		require.Equal(t, jsonOf(t, want), got["record"])
		require.Equal(t, store.RecordName("s", "running"), got["name"])
		require.Equal(t, redisstore.SpecVersion, got["spec"])
	})

	t.Run("completed, with its tombstone", func(t *testing.T) {
		r := runBin(t, 30*time.Second, "inspect", "--raw", "--redis", mr.Addr(), "--scope", "s", "--dict", dictFile, "done")
		require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		for _, want := range []string{"kind                    C", "state                   completed", "code                    201",
			"response.version        2", "response.compressed     true", "response.dictionary_id  40078",
			`response.headers        Location: "/v1/payments/pay_9"`, "tombstone               fingerprint32 "} {
			require.Contains(t, r.stdout, want)
		}
		require.Contains(t, r.stdout, "code 201, attempt 1")

		r = runBin(t, 30*time.Second, "inspect", "--raw", "--redis", mr.Addr(), "--scope", "s", "done", "--json")
		require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		got := jsonOf(t, []byte(r.stdout)).(map[string]any)
		resp := got["response"].(map[string]any)
		require.Equal(t, "unknown-dictionary", resp["refused"], "without --dict")
		require.Contains(t, resp["error"], "--dict FILE")
		ts := got["tombstone"].(map[string]any)
		require.Equal(t, json.Number("201"), ts["code"])
	})

	t.Run("a record of a later major version", func(t *testing.T) {
		r := runBin(t, 30*time.Second, "inspect", "--raw", "--redis", mr.Addr(), "--scope", "s", "later")
		require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		require.Contains(t, r.stdout, "refused: unknown-version")
		require.Contains(t, r.stdout, `"T-a record of a later major version"`)
		// inspect without --raw refuses it too: it never guesses.
		r = runBin(t, 30*time.Second, "inspect", "--redis", mr.Addr(), "--scope", "s", "later")
		require.Equal(t, 2, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		require.Contains(t, r.stderr, "unexpected reply")
	})

	t.Run("a record of idemkey 0.1", func(t *testing.T) {
		r := runBin(t, 30*time.Second, "inspect", "--raw", "--redis", mr.Addr(), "--scope", "s", "old")
		require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		require.Contains(t, r.stdout, "a record of idemkey 0.1")
		require.Contains(t, r.stdout, `legacy.state`)
		require.True(t, strings.Contains(r.stdout, `"completed"`), r.stdout)
	})

	t.Run("nothing", func(t *testing.T) {
		r := runBin(t, 30*time.Second, "inspect", "--raw", "--redis", mr.Addr(), "--scope", "s", "absent")
		require.Equal(t, 1, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		require.Contains(t, r.stderr, "no record and no tombstone")
	})
}
