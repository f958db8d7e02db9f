package grpcmw

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/idemkey/idemkey/internal/httpcore"
	"github.com/idemkey/idemkey/redisstore"
)

// The metadata key follows the HTTP header's rule, reimplemented here so
// that the module imports no internal package: the two agree on every key
// of the table.
func TestKeyRuleAgreesWithHTTP(t *testing.T) {
	for _, v := range []string{
		"abc", `"abc"`, "  abc\t", `" a b "`, `"a\"b"`, `"a\\b"`, `"a\b"`, `"abc`, `"abc"x`, `""`, "", " ",
		"a b", `a"b`, `a\b`, "a\x00b", "a\x7fb", "é", `"é"`, "\"a\tb\"", "0190b5e4-7c1d-7a2b-8c3d-4e5f6a7b8c9d",
		strings.Repeat("k", 255), strings.Repeat("k", 256), `"` + strings.Repeat("k", 255) + `"`,
		`"` + strings.Repeat("k", 256) + `"`, `"` + strings.Repeat(`\"`, 255) + `"`, `"` + strings.Repeat(`\"`, 256) + `"`,
		"!#$%&'()*+,-./:;<=>?@[]^_`{|}~", "!#$%&'()*+-./:;<=>?@[]^_`{|}~", "key,with,commas,longer-than-twenty-chars", `"a,b"`, "a, b",
	} {
		want, werr := httpcore.ParseKey(v)
		got, reason := parseKey(v)
		if werr != nil {
			require.NotEmpty(t, reason, "%q: HTTP refuses it (%v)", v, werr)
			require.Equal(t, werr.(*httpcore.KeyError).Reason, reason, "%q", v)
			continue
		}
		require.Empty(t, reason, "%q: HTTP accepts it", v)
		require.Equal(t, want, got, "%q", v)
	}
}

// A stored outcome decodes to what was stored; anything else is refused,
// never taken for an outcome.
func TestOutcomeEncoding(t *testing.T) {
	o := &outcome{code: codes.OK, typeName: "google.protobuf.Struct", payload: []byte{1, 2, 3},
		header: metadata.Pairs("location", "/x", "b-bin", "\x00\xff"), trailer: metadata.Pairs("t", "1", "t", "2")}
	r := o.response()
	got, err := decodeOutcome(r)
	require.NoError(t, err)
	require.Equal(t, o, got)
	for i := range len(r.Body) {
		_, err := decodeOutcome(redisstore.Response{Code: r.Code, Body: r.Body[:i]})
		require.ErrorIs(t, err, errUnreadable, "cut at %d", i)
	}
	for _, bad := range []redisstore.Response{
		{Code: 0, Body: nil},
		{Code: 0, Body: []byte{2, 0, 0, 0, 0}},
		{Code: 0, Body: []byte{1, 0, 0, 0, 0}},          // OK without a type
		{Code: 5, Body: []byte{1, 1, 'x', 0, 0, 0}},     // an error with a type
		{Code: 99, Body: []byte{1, 0, 0, 0, 0}},         // no such code
		{Code: 5, Body: []byte{1, 0, 0, 0xff, 0xff, 0}}, // a huge metadata count
		{Code: 5, Body: []byte{1, 0, 0, 0, 0, 7}},       // trailing bytes
	} {
		_, err := decodeOutcome(bad)
		require.ErrorIs(t, err, errUnreadable, "%v", bad)
	}
}

func FuzzDecodeOutcome(f *testing.F) {
	f.Add(0, (&outcome{typeName: "a.B", payload: []byte("x"), header: metadata.Pairs("k", "v")}).response().Body)
	f.Add(5, (&outcome{code: 5, payload: []byte("x")}).response().Body)
	f.Fuzz(func(t *testing.T, code int, body []byte) {
		o, err := decodeOutcome(redisstore.Response{Code: code, Body: body})
		if err != nil {
			return
		}
		again, err := decodeOutcome(o.response())
		require.NoError(t, err)
		require.Equal(t, o.code, again.code)
		require.Equal(t, o.payload, again.payload)
	})
}

// The README's contract table names every reason.
func TestReasonsDocumented(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	for _, r := range reasons {
		require.Contains(t, string(readme), "`"+r+"`", "README.md does not document %s", r)
	}
}
