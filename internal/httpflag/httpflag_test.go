package httpflag

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHeaders(t *testing.T) {
	var h Headers
	require.NoError(t, h.Set("x-user: u1"))
	require.NoError(t, h.Set("X-User:u2"))
	require.NoError(t, h.Set("Authorization: Bearer a\tb"))
	require.Equal(t, http.Header{"X-User": {"u1", "u2"}, "Authorization": {"Bearer a\tb"}}, h.Header)
	require.Equal(t, "Authorization: Bearer a\tb, X-User: u1, X-User: u2", h.String())
	for in, want := range map[string]string{
		"nocolon":       `want "Name: value"`,
		"bad name: v":   `invalid header name "bad name"`,
		": v":           `invalid header name ""`,
		"X: a\x00b":     "control character",
		"X: a\x7fb":     "control character",
		"X: line\r\nY:": "control character",
	} {
		require.ErrorContains(t, h.Set(in), want, in)
	}
}

func TestParseURL(t *testing.T) {
	u, err := ParseURL("http://127.0.0.1:8080/v1/payments?x=1")
	require.NoError(t, err)
	require.Equal(t, "/v1/payments", u.Path)
	for in, want := range map[string]string{
		"":                   "a URL is required",
		"ftp://h/x":          "the scheme must be http or https",
		"http:///x":          "no host",
		"http://h/%zz":       "invalid URL",
		"/relative/path/too": "the scheme must be http or https",
	} {
		_, err := ParseURL(in)
		require.ErrorContains(t, err, want, in)
	}
}

func TestIsToken(t *testing.T) {
	for _, ok := range []string{"POST", "Idempotency-Key", "x!#$%&'*+-.^_`|~9"} {
		require.True(t, IsToken(ok), ok)
	}
	for _, bad := range []string{"", "a b", "a:b", "ä", "a\x00"} {
		require.False(t, IsToken(bad), bad)
	}
}
