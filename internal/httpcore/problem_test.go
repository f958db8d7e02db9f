package httpcore

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProblemsAreDocumented holds the catalogue and docs/problems.md
// together: every problem type has its section, and every section a type.
func TestProblemsAreDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/problems.md")
	require.NoError(t, err)
	var documented []string
	for _, m := range regexp.MustCompile(`(?m)^## ([a-z-]+)\s*$`).FindAllSubmatch(doc, -1) {
		documented = append(documented, string(m[1]))
	}
	var slugs []string
	for _, p := range catalogue {
		slugs = append(slugs, p.slug)
		require.NotEmpty(t, p.title, p.slug)
	}
	slices.Sort(documented)
	slices.Sort(slugs)
	require.Equal(t, slugs, documented, "docs/problems.md and the catalogue in problem.go differ")
	require.Len(t, slices.Compact(slugs), len(catalogue), "a slug appears twice")
}
