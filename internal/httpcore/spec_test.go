package httpcore

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/corpus"
)

// TestSpecHeaderTables: the header tables docs/spec.md lists (§11.3) are
// the ones the encoder and decoder use, entry for entry: an implementation
// in another language builds them from the spec.
func TestSpecHeaderTables(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "spec.md"))
	require.NoError(t, err)
	for marker, want := range map[string][]string{"header-names": headerNameList, "header-values": headerValueList} {
		block := regexp.MustCompile("(?s)<!-- " + marker + " -->\n```\n(.*?)```").FindSubmatch(b)
		require.NotNil(t, block, "docs/spec.md has no %s block", marker)
		var got []string
		for i, line := range strings.Split(strings.TrimSuffix(string(block[1]), "\n"), "\n") {
			index, value, ok := strings.Cut(strings.TrimLeft(line, " "), "  ")
			require.True(t, ok, "%s line %q", marker, line)
			require.Equal(t, strconv.Itoa(i), index, "%s line %q", marker, line)
			got = append(got, value)
		}
		require.Equal(t, want, got, marker)
	}
}

// FuzzResponseFields: Fields, the field-by-field reader that inspect --raw
// and the golden vectors use, accepts exactly what Decode accepts, refuses
// it for the same reason, and reads the same headers and body.
func FuzzResponseFields(f *testing.F) {
	all := codecs(f)
	h := http.Header{"Content-Type": {"application/json"}, "Location": {"/p/1"}, "X-A": {"b", ""}}
	f.Add(appendV1(nil, h, []byte("body"), true))
	f.Add([]byte{0x20, 1, 0, 0})
	f.Add([]byte{0x24, 0})
	for _, c := range all {
		f.Add(c.Append(nil, h, corpus.Payment.Bodies(9, 1)[0], false))
	}
	dec := all["zstd+dict"]
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := dec.Decode(200, b)
		fields, ferr := dec.Fields(b)
		if err != nil {
			require.Error(t, ferr)
			for _, target := range []error{ErrCorruptResponse, ErrUnknownResponseVersion, ErrUnknownDictionary} {
				require.Equal(t, errors.Is(err, target), errors.Is(ferr, target), "%v / %v", err, ferr)
			}
			return
		}
		require.NoError(t, ferr)
		require.Equal(t, r.Body, fields.Body)
		require.Equal(t, r.BodyOmitted, fields.BodyOmitted)
		require.Equal(t, r.Compressed, fields.Compressed)
		got := http.Header{}
		for _, kv := range fields.Headers {
			got[kv[0]] = append(got[kv[0]], kv[1])
		}
		require.Equal(t, r.Header, got)
	})
}
