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

	// A problem that answers a section of the IETF draft says which, in
	// its spec member and in its documentation; the others name none.
	for _, p := range catalogue {
		m := regexp.MustCompile(`(?ms)^## ` + p.slug + `\s*$(.*?)(^## |\z)`).FindSubmatch(doc)
		require.NotNil(t, m, p.slug)
		cited := regexp.MustCompile(`section-\d+(\.\d+)*`).FindAll(m[1], -1)
		if p.section == "" {
			require.Empty(t, cited, "%s cites the draft, but its problem has no section", p.slug)
			continue
		}
		require.Equal(t, [][]byte{[]byte(p.section)}, cited, "docs/problems.md's %s must cite `%s`", p.slug, p.section)
	}
}
