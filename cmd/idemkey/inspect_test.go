package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/corpus"
	"github.com/idemkey/idemkey/internal/httpcore"
	"github.com/idemkey/idemkey/internal/zdict"
	"github.com/idemkey/idemkey/redisstore"
)

// hostile holds strings that would drive a terminal if printed raw: ESC,
// CSI, OSC ended by BEL, BEL, and C1 controls both as raw bytes (invalid
// UTF-8) and as UTF-8 (U+009B, the 8-bit CSI, and U+0085).
var hostile = map[string]string{
	"ESC":       "\x1b",
	"CSI":       "\x1b[2J\x1b[31m",
	"OSC BEL":   "\x1b]0;owned\x07",
	"BEL":       "\a",
	"C1 raw":    "\x9b31m\x85",
	"C1 UTF-8":  "\u009b31m\u0085",
	"DEL":       "\x7f",
	"CR":        "x\rover",
	"bidi":      "\u202eevil",
	"plain tab": "a\tb",
}

// requireTerminalSafe fails unless out is valid UTF-8 with no control
// character other than newline: no C0 byte, no DEL, no C1 code point and
// no raw C1 byte.
func requireTerminalSafe(t *testing.T, out string) {
	t.Helper()
	for i, r := range out {
		if r == utf8.RuneError {
			_, size := utf8.DecodeRuneInString(out[i:])
			require.NotEqual(t, 1, size, "invalid UTF-8 at byte %d: %q", i, out[max(0, i-20):min(len(out), i+20)])
		}
		bad := (r < 0x20 && r != '\n') || (r >= 0x7f && r <= 0x9f) || r == '\u202e'
		require.False(t, bad, "control character %U at byte %d reaches the terminal: %q", r, i, out[max(0, i-20):min(len(out), i+20)])
	}
}

// Regression: the label and the recovery point were printed raw (and the
// body preview quoted only C0 controls), so a client-chosen path with
// escape sequences reached the operator's terminal.
func TestInspectTextQuotesClientStrings(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	created := now.Add(-time.Second)
	for name, s := range hostile {
		t.Run(name, func(t *testing.T) {
			data := newBytesJSON([]byte("data" + s))
			started := recordJSON{
				Found: true, Prefix: "idem:", Scope: "scope" + s, Key: "key" + s,
				Label: "POST /v1/" + s, State: string(redisstore.Started), Attempt: 2,
				Fingerprint: "00112233445566778899aabbccddeeff", RecoveryPoint: "charged" + s, RecoveryData: &data,
				CreatedAt: &created, TTLMS: 1000, LeaseTTLMS: 500,
			}
			var b strings.Builder
			require.NoError(t, started.writeText(&b, now))
			out := b.String()
			requireTerminalSafe(t, out)
			for _, want := range []string{quoteText("POST /v1/" + s), quoteText("charged" + s), quoteText("key" + s), quoteText("scope" + s)} {
				require.Contains(t, out, want)
			}

			completed := recordJSON{
				Found: true, Prefix: "idem:", Scope: "s", Key: "k", State: string(redisstore.Completed), Attempt: 1,
				Fingerprint: "00112233445566778899aabbccddeeff", TTLMS: 1000,
				Response: &responseJSON{Status: 201, HTTP: true,
					Headers:  http.Header{"Location": {"/v1/" + s}, "X-Echo" + s: {"v"}},
					BodySize: len("body" + s), Body: newBytesJSON([]byte("body" + s))},
			}
			b.Reset()
			require.NoError(t, completed.writeText(&b, now))
			out = b.String()
			requireTerminalSafe(t, out)
			require.Contains(t, out, "Location: "+quoteText("/v1/"+s))

			outcome := completed
			outcome.Response = &responseJSON{Status: 7, BodySize: len("outcome" + s), Body: newBytesJSON([]byte("outcome" + s))}
			b.Reset()
			require.NoError(t, outcome.writeText(&b, now))
			requireTerminalSafe(t, b.String())
		})
	}
}

func TestQuoteText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"POST /v1/payments", `"POST /v1/payments"`},
		{"\x1b[31m", `"\x1b[31m"`},
		{"\a", `"\a"`},
		{"\x9b", `"\x9b"`},
		{"\u009b", `"\u009b"`},
		{"\u0085", `"\u0085"`},
		{"café ✓", `"café ✓"`},
		{"\u202e", `"\u202e"`},
	} {
		require.Equal(t, tc.want, quoteText(tc.in), "%+q", tc.in)
	}
}

// Regression: a completed record keeps no label, created time or recovery
// point, and inspect printed "created unknown" and "recovery none" for it as
// if they were lost.
func TestInspectTextCompletedSaysWhatItKeeps(t *testing.T) {
	rec := describeRecord("idem:", &redisstore.Record{
		State: redisstore.Completed, Scope: "s", Key: "k", Fingerprint: "0123456789abcdef", Attempt: 1,
		Response: &redisstore.Response{Code: 3, Body: []byte("done")}, TTL: time.Hour,
	}, nil)
	var b strings.Builder
	require.NoError(t, rec.writeText(&b, time.Now()))
	out := b.String()
	require.NotContains(t, out, "unknown")
	require.NotRegexp(t, `(?m)^(label|recovery|created|lease)\s`, out)
	require.Contains(t, out, "kept         fingerprint, attempt and outcome only")
	require.Contains(t, out, "response     code 3 (not an HTTP response)")
	require.Contains(t, out, `body         "done"`)

	started := describeRecord("idem:", &redisstore.Record{
		State: redisstore.Started, Scope: "s", Key: "k", Fingerprint: "0123456789abcdef", Attempt: 1,
		Label: "job 7", CreatedAt: time.Now().Add(-time.Minute), TTL: time.Hour, LeaseTTL: time.Second,
	}, nil)
	b.Reset()
	require.NoError(t, started.writeText(&b, time.Now()))
	out = b.String()
	require.Contains(t, out, `label        "job 7"`)
	require.Contains(t, out, "recovery     none")
	require.Regexp(t, `created      \S+Z \(1m0`, out)
	require.Contains(t, out, "lease        1s left")
	require.NotContains(t, out, "kept")
}

// The JSON of a completed record has no created_at: it is not kept, and
// the zero time would be a wrong one.
func TestInspectJSONCompletedHasNoCreatedAt(t *testing.T) {
	rec := describeRecord("idem:", &redisstore.Record{State: redisstore.Completed, Key: "k", Response: &redisstore.Response{Code: 1}}, nil)
	require.Nil(t, rec.CreatedAt)
	at := time.Now()
	rec = describeRecord("idem:", &redisstore.Record{State: redisstore.Started, Key: "k", CreatedAt: at}, nil)
	require.NotNil(t, rec.CreatedAt)
	require.True(t, at.Equal(*rec.CreatedAt))
}

// The binary, end to end: a record written by a store with escapes in its
// label and recovery point is shown quoted.
func TestInspectQuotesEndToEnd(t *testing.T) {
	mr, store := miniStore(t)
	ctx := context.Background()
	c, err := store.Claim(ctx, redisstore.Request{Scope: "s", Key: "k1", Label: "POST /v1/\x1b]0;owned\x07\x1b[2J\u009b31m"})
	require.NoError(t, err)
	require.NoError(t, c.Lease.Checkpoint(ctx, "charged\x1b[31m\x9b", []byte("\x1b[5m")))

	r := runBin(t, 30*time.Second, "inspect", "--redis", "redis://"+mr.Addr(), "--scope", "s", "k1")
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	requireTerminalSafe(t, r.stdout)
	require.Contains(t, r.stdout, `label        "POST /v1/\x1b]0;owned\a\x1b[2J\u009b31m"`)
	require.Contains(t, r.stdout, `recovery     "charged\x1b[31m\x9b", data "\x1b[5m"`)
}

// Regression: --redis host:port without a scheme was a raw URL-parse error
// ("first path segment in URL cannot contain colon"), for every command.
func TestRedisWithoutScheme(t *testing.T) {
	mr := miniredis.RunT(t)

	r := runBin(t, 30*time.Second, "inspect", "--redis", mr.Addr(), "--scope", "s", "absent")
	require.Equal(t, 1, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stderr, "no record for key")
	require.Contains(t, r.stderr, mr.Addr())

	// With a database number, and from $REDIS_URL.
	r = runBin(t, 30*time.Second, "inspect", "--redis", mr.Addr()+"/0", "--scope", "s", "absent")
	require.Equal(t, 1, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	cmd := exec.Command(bin, "inspect", "--scope", "s", "absent")
	cmd.Env = append(childEnv(), "REDIS_URL="+mr.Addr())
	out, _ := cmd.CombinedOutput()
	require.Equal(t, 1, cmd.ProcessState.ExitCode(), "%s", out)
	require.Contains(t, string(out), "no record for key")

	s := startServe(t, "--redis", mr.Addr())
	got, err := get(s.url + "/v1/stats")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, got.status)
	require.Contains(t, s.stdout.String(), "redis: "+mr.Addr()+" db 0")
}

func TestRedisOptions(t *testing.T) {
	for _, tc := range []struct {
		in   string
		addr string
		db   int
		err  string
	}{
		{"127.0.0.1:6380", "127.0.0.1:6380", 0, ""},
		{"localhost:6380/2", "localhost:6380", 2, ""},
		{"redis.internal", "redis.internal:6379", 0, ""},
		{"[::1]:6380", "[::1]:6380", 0, ""},
		{"redis://127.0.0.1:6380/1", "127.0.0.1:6380", 1, ""},
		{"rediss://h:6380", "h:6380", 0, ""},
		{"http://h:6380", "", 0, "scheme"},
		{"127.0.0.1:6380/x", "", 0, "invalid"},
		{"", "", 0, "empty"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			o, err := redisOptions(tc.in)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.True(t, strings.HasPrefix(err.Error(), "--redis:"), err.Error())
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.addr, o.Addr)
			require.Equal(t, tc.db, o.DB)
		})
	}
}

// A body compressed with a dictionary: without --dict inspect says it cannot
// decode it and how to; with the dictionary it shows the response.
func TestInspectDictionary(t *testing.T) {
	dict, err := zdict.Train(corpus.Payment.Bodies(100, 300), zdict.Options{ID: 40077, Size: 8 << 10})
	require.NoError(t, err)
	dictFile := filepath.Join(t.TempDir(), "payments.zstd")
	require.NoError(t, os.WriteFile(dictFile, dict, 0o600))
	codec, err := httpcore.NewResponseCodec(httpcore.Compression{Dictionaries: [][]byte{dict}})
	require.NoError(t, err)
	body := corpus.Payment.Bodies(7, 1)[0]
	stored := codec.Append(nil, http.Header{"Location": {"/v1/payments/pay_7"}}, body, false)

	mr, store := miniStore(t)
	ctx := context.Background()
	c, err := store.Claim(ctx, redisstore.Request{Scope: "s", Key: "k1"})
	require.NoError(t, err)
	require.NoError(t, c.Lease.Complete(ctx, redisstore.Response{Code: http.StatusCreated, Body: stored}))

	r := runBin(t, 30*time.Second, "inspect", "--redis", mr.Addr(), "--scope", "s", "k1")
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "201 Created, not decoded: ")
	require.Contains(t, r.stdout, "dictionary")
	require.Contains(t, r.stdout, "--dict FILE")

	r = runBin(t, 30*time.Second, "inspect", "--redis", mr.Addr(), "--scope", "s", "--dict", dictFile, "k1", "--json")
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	var out recordJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.NotNil(t, out.Response)
	require.Empty(t, out.Response.Undecoded)
	require.Equal(t, "/v1/payments/pay_7", out.Response.Headers.Get("Location"))
	require.NotNil(t, out.Response.Body.Text)
	require.Equal(t, string(body), *out.Response.Body.Text)

	r = runBin(t, 30*time.Second, "inspect", "--redis", mr.Addr(), "--scope", "s", "--dict", filepath.Join(t.TempDir(), "absent"), "k1")
	require.Equal(t, 2, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stderr, "--dict")
}

// connect gives a client 2s read and write timeouts (the auto-pipeliner
// frees a stalled connection only then) unless the URL sets them; a write
// timeout left out follows the read timeout, as in go-redis.
func TestConnectTimeouts(t *testing.T) {
	mr := miniredis.RunT(t)
	for _, tc := range []struct {
		query       string
		read, write time.Duration
	}{
		{"", 2 * time.Second, 2 * time.Second},
		{"?read_timeout=10s", 10 * time.Second, 10 * time.Second},
		{"?read_timeout=10s&write_timeout=1s", 10 * time.Second, time.Second},
		{"?write_timeout=3s", 2 * time.Second, 3 * time.Second},
	} {
		rdb, err := connect(context.Background(), "redis://"+mr.Addr()+"/0"+tc.query)
		require.NoError(t, err, tc.query)
		o := rdb.Options()
		require.NoError(t, rdb.Close())
		require.Equal(t, tc.read, o.ReadTimeout, tc.query)
		require.Equal(t, tc.write, o.WriteTimeout, tc.query)
		require.True(t, o.ContextTimeoutEnabled, tc.query)
	}
}

// miniStore returns a miniredis and a store with the default options on it,
// for records inspect then reads.
func miniStore(t *testing.T) (*miniredis.Miniredis, *redisstore.Store) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, redisstore.Options{})
	require.NoError(t, err)
	return mr, store
}
