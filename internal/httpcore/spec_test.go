package httpcore

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
