package idemclient

import (
	"context"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var uuidV7 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestNewKeyIsAUUIDv7(t *testing.T) {
	before := time.Now().UnixMilli()
	seen := make(map[string]bool)
	for range 1000 {
		k := NewKey()
		require.Regexp(t, uuidV7, k)
		require.False(t, seen[k], "duplicate key %s", k)
		seen[k] = true
		// The first 48 bits are the Unix time in milliseconds.
		b, err := hex.DecodeString(strings.ReplaceAll(k, "-", "")[:12])
		require.NoError(t, err)
		var ms int64
		for _, x := range b {
			ms = ms<<8 | int64(x)
		}
		require.GreaterOrEqual(t, ms, before)
		require.LessOrEqual(t, ms, time.Now().UnixMilli())
	}
}

func TestCheckKey(t *testing.T) {
	for _, tc := range []struct {
		key    string
		format KeyFormat
		ok     bool
	}{
		{"order-42", FormatToken, true},
		{"order-42", FormatString, true},
		{strings.Repeat("k", MaxKeyLen), FormatToken, true},
		{strings.Repeat("k", MaxKeyLen+1), FormatToken, false},
		{strings.Repeat("k", MaxKeyLen+1), FormatString, false},
		{"", FormatToken, false},
		{"", FormatString, false},
		{"has space", FormatToken, false},
		{"has space", FormatString, true},
		{`q"uote`, FormatToken, false},
		{`q"uote`, FormatString, true},
		{`back\slash`, FormatToken, false},
		{`back\slash`, FormatString, true},
		{"a,b", FormatToken, false}, // the server refuses it: two merged keys look so
		{"a,b", FormatString, true},
		{"tab\there", FormatString, false},
		{"new\nline", FormatString, false},
		{"del\x7f", FormatString, false},
		{"naïve", FormatString, false},
	} {
		err := checkKey(tc.key, tc.format)
		if tc.ok {
			require.NoError(t, err, "%q %s", tc.key, tc.format)
		} else {
			require.ErrorIs(t, err, ErrInvalidKey, "%q %s", tc.key, tc.format)
		}
	}
}

func TestEncodeKey(t *testing.T) {
	require.Equal(t, "abc", encodeKey("abc", FormatToken))
	require.Equal(t, `"abc"`, encodeKey("abc", FormatString))
	require.Equal(t, `"a \"b\" \\c"`, encodeKey(`a "b" \c`, FormatString))
	require.Equal(t, "token", FormatToken.String())
	require.Equal(t, "string", FormatString.String())
	require.Equal(t, "KeyFormat(7)", KeyFormat(7).String())
}

func TestWithKey(t *testing.T) {
	_, ok := keyFrom(context.Background())
	require.False(t, ok)
	k, ok := keyFrom(WithKey(context.Background(), "job-7"))
	require.True(t, ok)
	require.Equal(t, "job-7", k)
}
