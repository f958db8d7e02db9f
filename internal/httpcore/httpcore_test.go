package httpcore

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/corpus"
	"github.com/idemkey/idemkey/redisstore"
)

func TestParseKey(t *testing.T) {
	valid := map[string]string{
		"abc":                                  "abc",
		"  abc\t":                              "abc",
		"550e8400-e29b-41d4-a716-446655440000": "550e8400-e29b-41d4-a716-446655440000",
		`"abc"`:                                "abc",
		`"a b"`:                                "a b",
		`"a\"b\\c"`:                            `a"b\c`,
		"{x}:*?[]":                             "{x}:*?[]",
		strings.Repeat("k", 255):               strings.Repeat("k", 255),
		`"` + strings.Repeat("k", 255) + `"`:   strings.Repeat("k", 255),
		`"` + strings.Repeat(`\\`, 255) + `"`:  strings.Repeat(`\`, 255),
		`"a,b"`:                                "a,b",
		"~!#$%&'()*+-./0123456789:;<=>?@[]^_`{|}": "~!#$%&'()*+-./0123456789:;<=>?@[]^_`{|}",
	}
	for in, want := range valid {
		got, err := ParseKey(in)
		require.NoError(t, err, "%q", in)
		require.Equal(t, want, got, "%q", in)
	}
	invalid := []string{
		"", " ", `""`, `"`, `"abc`, `"abc"x`, `"abc";p=1`, `"a\b"`, `"a\`, "a b", "a\x00b", "a\x7fb", "a\nb",
		"ключ", `"ключ"`, "a\"b", `a\b`, strings.Repeat("k", 256), `"` + strings.Repeat("k", 256) + `"`,
		"\r\nX-Injected: 1", `"a` + "\x01" + `"`, "a,b", "key,with,commas,longer-than-twenty-chars", "a, b", ",",
	}
	for _, in := range invalid {
		_, err := ParseKey(in)
		require.ErrorIs(t, err, ErrKey, "%q", in)
	}
}

// A comma in a bare key is what an intermediary makes of two Idempotency-Key
// fields merged into one line: ParseKey refuses it, saying so, rather than
// take two keys for a third.
func TestParseKeyRefusesCommaInBareKey(t *testing.T) {
	_, err := ParseKey("key,with,commas,longer-than-twenty-chars")
	var ke *KeyError
	require.ErrorAs(t, err, &ke)
	require.Equal(t, "the key has a comma at position 4: a bare key cannot hold one, as a comma is what an intermediary "+
		"puts between two Idempotency-Key fields it merges (quote the key as an RFC 8941 string to include a comma)", ke.Reason)
	k, err := ParseKey(`"key,with,commas"`)
	require.NoError(t, err)
	require.Equal(t, "key,with,commas", k)
}

// FuzzParseKey checks ParseKey's promises on any input: an accepted key is 1
// to 255 printable ASCII characters, a bare token round-trips, and quoting
// an accepted key as an sf-string gives it back.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"a\"b"`, "", `"`, strings.Repeat("k", 256), "a b", "\x00", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		k, err := ParseKey(in)
		if err != nil {
			if !errors.Is(err, ErrKey) {
				t.Fatalf("ParseKey(%q): error %v does not wrap ErrKey", in, err)
			}
			return
		}
		if k == "" || len(k) > MaxKeyLen || !utf8.ValidString(k) {
			t.Fatalf("ParseKey(%q) = %q: bad length", in, k)
		}
		for i := 0; i < len(k); i++ {
			if k[i] < ' ' || k[i] > '~' {
				t.Fatalf("ParseKey(%q) = %q: non-printable byte", in, k)
			}
		}
		if bare := strings.Trim(in, " \t"); !strings.HasPrefix(bare, `"`) && strings.Contains(k, ",") {
			t.Fatalf("ParseKey(%q) = %q: a bare key with a comma", in, k)
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(k) + `"`
		if k2, err := ParseKey(quoted); err != nil || k2 != k {
			t.Fatalf("ParseKey(%q) = %q, %v; want %q", quoted, k2, err, k)
		}
	})
}

func TestResponseCodec(t *testing.T) {
	h := http.Header{"Location": {"/a"}, "X-Multi": {"1", "2"}, "Empty": {""}}
	body := []byte("\x00binary\xff")
	b := appendResponse(nil, h, body, false)
	r, err := DecodeResponse(201, b)
	require.NoError(t, err)
	require.Equal(t, &StoredResponse{Status: 201, Header: h, Body: body}, r)

	r, err = DecodeResponse(200, appendResponse(nil, http.Header{}, nil, true))
	require.NoError(t, err)
	require.True(t, r.BodyOmitted)
	require.Empty(t, r.Body)

	for _, bad := range [][]byte{nil, {}, {2, 0}, {1}, {1, 0, 5}, {1, 0, 1, 10, 'a'}, {1, 0, 0xff}} {
		_, err := DecodeResponse(200, bad)
		require.ErrorIs(t, err, ErrCorruptResponse, "%q", bad)
	}
}

// FuzzDecodeResponse makes sure stored bytes of any shape (either version,
// raw or compressed, with a dictionary or without) decode or fail cleanly,
// and that what decodes re-encodes, through every codec, to the same
// response.
func FuzzDecodeResponse(f *testing.F) {
	all := codecs(f)
	h := http.Header{"Content-Type": {"application/json"}, "Location": {"/p/1"}, "X-A": {"b", ""}}
	body := corpus.Payment.Bodies(9, 1)[0]
	f.Add(appendResponse(nil, http.Header{"A": {"b"}}, []byte("body"), false))
	f.Add(appendV1(nil, h, []byte("body"), true))
	f.Add([]byte{1, 0, 0})
	f.Add([]byte{1, 1, 2, 1, 'a', 0})
	f.Add([]byte{0x20, 1, 0, 0})
	for _, c := range all {
		f.Add(c.Append(nil, h, body, false))
	}
	dec := all["zstd+dict"] // holds both dictionaries
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := dec.Decode(200, b)
		if err != nil {
			require.ErrorIs(t, err, ErrCorruptResponse)
			return
		}
		for name, c := range all {
			again, err := dec.Decode(200, c.Append(nil, r.Header, r.Body, r.BodyOmitted))
			require.NoError(t, err, name)
			require.Equal(t, r.Body, again.Body, name)
			require.Equal(t, r.BodyOmitted, again.BodyOmitted, name)
			require.Equal(t, len(r.Header), len(again.Header), name)
			for k, vs := range r.Header {
				if len(vs) > 0 {
					require.Equal(t, vs, again.Header[k], name)
				}
			}
		}
	})
}

func TestIsJSON(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json": true, "Application/JSON; charset=utf-8": true, "application/merge-patch+json": true,
		" application/json ;x=y": true, "text/plain": false, "": false, "application/jsonx": false, "multipart/form-data": false,
	} {
		require.Equal(t, want, isJSON(ct), ct)
	}
}

func TestFingerprint(t *testing.T) {
	h := &Guard{o: Config{FingerprintHeaders: []string{"Api-Version"}, IgnoreFields: []string{"sent_at"}}.withDefaults()}
	fp := func(method, target, ct, body string, hdr ...string) string {
		r := httptest.NewRequest(method, target, nil)
		r.Header.Set("Content-Type", ct)
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Add(hdr[i], hdr[i+1])
		}
		f, p := h.fingerprint(r, []byte(body))
		require.Nil(t, p)
		require.Len(t, f, 32)
		return f
	}
	base := fp("POST", "/p?a=1&b=2", "application/json", `{"x":1,"y":[1,2]}`)
	same := []string{
		fp("POST", "/p?b=2&a=1", "application/json", `{ "y": [1, 2], "x": 1.0 }`),
		fp("POST", "/p?a=1&b=2", "application/json; charset=utf-8", `{"x":1,"y":[1,2],"sent_at":"now"}`),
		fp("POST", "/p?a=1&b=2", "application/json", `{"x":1,"y":[1,2]}`, "X-Request-Id", "other"),
	}
	for i, s := range same {
		require.Equal(t, base, s, "case %d", i)
	}
	different := []string{
		fp("PUT", "/p?a=1&b=2", "application/json", `{"x":1,"y":[1,2]}`),
		fp("POST", "/q?a=1&b=2", "application/json", `{"x":1,"y":[1,2]}`),
		fp("POST", "/p?a=1&b=3", "application/json", `{"x":1,"y":[1,2]}`),
		fp("POST", "/p?a=1&b=2", "application/json", `{"x":2,"y":[1,2]}`),
		fp("POST", "/p?a=1&b=2", "application/json", `{"x":1,"y":[2,1]}`),
		fp("POST", "/p?a=1&b=2", "text/plain", `{"x":1,"y":[1,2]}`),
		fp("POST", "/p?a=1&b=2", "application/json", `{"x":1,"y":[1,2]}`, "Api-Version", "2"),
		fp("POST", "/p%2Fq?a=1&b=2", "application/json", `{"x":1,"y":[1,2]}`),
	}
	seen := map[string]int{base: -1}
	for i, d := range different {
		j, dup := seen[d]
		require.False(t, dup, "case %d hashes like case %d", i, j)
		seen[d] = i
	}
	// Raw bodies are bytes: whitespace matters there.
	require.NotEqual(t, fp("POST", "/p", "text/plain", "a b"), fp("POST", "/p", "text/plain", "a  b"))
	// Duplicate JSON members are refused, not fingerprinted.
	r := httptest.NewRequest("POST", "/p", nil)
	r.Header.Set("Content-Type", "application/json")
	_, p := h.fingerprint(r, []byte(`{"a":1,"a":2}`))
	require.NotNil(t, p)
	require.Equal(t, "json-malformed", p.slug)
	require.Contains(t, p.detail, "same member name twice")
}

func TestDefaultScope(t *testing.T) {
	scope := func(hdr ...string) string {
		r := httptest.NewRequest("POST", "/", nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Add(hdr[i], hdr[i+1])
		}
		s, err := DefaultScope(r)
		require.NoError(t, err)
		return s
	}
	alice, bob := scope("Authorization", "Bearer alice"), scope("Authorization", "Bearer bob")
	require.NotEqual(t, alice, bob)
	require.Equal(t, alice, scope("Authorization", "Bearer alice"))
	require.NotContains(t, alice, "alice", "the credential is never stored")
	require.NotEqual(t, alice, scope("X-Api-Key", "Bearer alice"), "two headers, two scopes")
	_, err := DefaultScope(httptest.NewRequest("POST", "/", nil))
	require.ErrorIs(t, err, ErrNoCredential, "no credential, no shared scope")
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("Cookie", "session=alice")
	_, err = DefaultScope(r)
	require.ErrorIs(t, err, ErrNoCredential, "a cookie is not a credential the default knows")
}

func TestDefaultFinal(t *testing.T) {
	for code, want := range map[int]bool{100: false, 200: true, 201: true, 303: true, 400: true, 402: true, 404: true,
		408: false, 409: false, 422: true, 425: false, 429: false, 499: true, 500: false, 503: false} {
		require.Equal(t, want, DefaultFinal(code), "%d", code)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	require.Equal(t, "1", retryAfterSeconds(1))
	require.Equal(t, "1", retryAfterSeconds(1e9))
	require.Equal(t, "2", retryAfterSeconds(1e9+1))
}

func TestScopeErrorIs401WithChallenge(t *testing.T) {
	h := &Guard{o: Config{Logger: slog.New(slog.DiscardHandler),
		Scope: func(*http.Request, any) (string, error) { return "", errors.New("no API key") }}.withDefaults(), hintScope: &sync.Once{}}
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
	r.Header.Set("Idempotency-Key", "k")
	w := httptest.NewRecorder()
	x, pass := h.Begin(w, r, nil)
	require.Nil(t, x)
	require.Nil(t, pass)
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.Equal(t, "Bearer", w.Header().Get("WWW-Authenticate"))
	require.Contains(t, w.Body.String(), "caller-unknown")
	require.NotContains(t, w.Body.String(), "no API key", "the application's error goes to the log")
}

func TestBeginEdgeCases(t *testing.T) {
	mr := miniredis.RunT(t)
	store, err := redisstore.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), redisstore.Options{})
	require.NoError(t, err)
	begin := func(h *Guard, target, key string) (*httptest.ResponseRecorder, *Exchange) {
		r := httptest.NewRequest(http.MethodPost, target, nil)
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		x, _ := h.Begin(w, r, nil)
		return w, x
	}

	t.Run("a path over 1 KiB still works: the label is cut", func(t *testing.T) {
		h := New(store, Config{Scope: func(*http.Request, any) (string, error) { return "s", nil }})
		w, x := begin(h, "/"+strings.Repeat("p", 3000), "long-path")
		require.NotNil(t, x, w.Body.String())
		x.Run(func() {
			rec, err := store.Lookup(context.Background(), "s", "long-path")
			require.NoError(t, err)
			require.Len(t, rec.Label, redisstore.MaxFieldLen)
			x.Recorder.WriteHeader(http.StatusCreated)
		})
	})

	t.Run("an oversized scope is a server error, not 503", func(t *testing.T) {
		h := New(store, Config{Logger: slog.New(slog.DiscardHandler),
			Scope: func(*http.Request, any) (string, error) { return strings.Repeat("s", 2000), nil }})
		w, x := begin(h, "/", "k")
		require.Nil(t, x)
		require.Equal(t, http.StatusInternalServerError, w.Code)
		require.Contains(t, w.Body.String(), "scope-invalid")
	})

	t.Run("a client gone before the claim claims nothing", func(t *testing.T) {
		h := New(store, Config{Scope: func(*http.Request, any) (string, error) { return "s", nil }})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/", nil)
		r.Header.Set("Idempotency-Key", "gone")
		w := httptest.NewRecorder()
		x, pass := h.Begin(w, r, nil)
		require.Nil(t, x)
		require.Nil(t, pass)
		_, err := store.Lookup(context.Background(), "s", "gone")
		require.ErrorIs(t, err, redisstore.ErrNotFound)
	})

	t.Run("a request deadline sooner than Timeout bounds the claim", func(t *testing.T) {
		h := New(store, Config{Timeout: time.Hour, Scope: func(*http.Request, any) (string, error) { return "s", nil }})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/", nil)
		r.Header.Set("Idempotency-Key", "soon")
		w := httptest.NewRecorder()
		x, _ := h.Begin(w, r, nil)
		require.NotNil(t, x, w.Body.String())
		x.Run(func() { x.Recorder.WriteHeader(http.StatusCreated) })
		require.Equal(t, http.StatusCreated, w.Code)
	})

	t.Run("the key problem says what is wrong once", func(t *testing.T) {
		w, _ := begin(New(store, Config{}), "/", "a b")
		require.Equal(t, http.StatusBadRequest, w.Code)
		require.NotContains(t, w.Body.String(), "malformed idempotency key:")
		require.Contains(t, w.Body.String(), "visible ASCII")
	})
}
