package jsoncanon_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/jsoncanon"
)

func ExampleCanonical() {
	a, _ := jsoncanon.Canonical([]byte(`{"to": "ann@example.com", "subject":"Hi", "n": 1.0}`), jsoncanon.Options{})
	b, _ := jsoncanon.Canonical([]byte(`{"n":1,"subject":"Hi","to":"ann\u0040example.com","sent_at":"12:01"}`),
		jsoncanon.Options{Omit: []string{"sent_at"}})
	fmt.Println(string(a))
	fmt.Println(bytes.Equal(a, b))
	// Output:
	// {"n":1,"subject":"Hi","to":"ann@example.com"}
	// true
}

// Documents that mean the same write the same bytes into a hash, and what
// no single form represents faithfully is refused with the sentinel that
// says why.
func TestCanonicalFormIsTheMiddlewares(t *testing.T) {
	same := [][]byte{[]byte(`{"b":[1,2e0],"a":"\u00e9"}`), []byte("{ \"a\" : \"é\", \"b\" : [ 1.0, 20e-1 ] }")}
	var sums [][32]byte
	for _, doc := range same {
		h := sha256.New()
		n, err := jsoncanon.Write(h, doc, jsoncanon.Options{})
		require.NoError(t, err)
		c, err := jsoncanon.Canonical(doc, jsoncanon.Options{})
		require.NoError(t, err)
		require.EqualValues(t, len(c), n)
		require.Equal(t, `{"a":"é","b":[1,2]}`, string(c))
		sums = append(sums, [32]byte(h.Sum(nil)))
	}
	require.Equal(t, sums[0], sums[1])

	for _, tc := range []struct {
		doc  string
		opts jsoncanon.Options
		want error
	}{
		{`{"a":1,"a":2}`, jsoncanon.Options{}, jsoncanon.ErrDuplicateKey},
		{`{"a":1,}`, jsoncanon.Options{}, jsoncanon.ErrSyntax},
		{`[[1]]`, jsoncanon.Options{MaxDepth: 1}, jsoncanon.ErrDepth},
	} {
		var buf bytes.Buffer
		_, err := jsoncanon.Write(&buf, []byte(tc.doc), tc.opts)
		require.ErrorIs(t, err, tc.want, tc.doc)
		var se *jsoncanon.SyntaxError
		require.True(t, errors.As(err, &se), tc.doc)
		require.Zero(t, buf.Len(), "nothing written for refused input")
	}
}
