package readmetest

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// importRule is one row of docs/architecture.md's table "Who may import
// what": the packages of the first column may import, from this module,
// those of the second (tests aside). Packages are written in `backquotes`,
// relative to the module, "dir/..." for dir and every package under it; the
// second column may say nothing or anything instead; text in parentheses
// is a comment.
type importRule struct {
	line     int
	pkgs     []string // packages or "dir/..." patterns
	may      []string // packages or patterns; nil with anything
	anything bool
}

// matches reports whether package pkg is named by pattern: the package
// itself, or, for "dir/...", dir or any package under it.
func matches(pattern, pkg string) bool {
	if dir, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == dir || strings.HasPrefix(pkg, dir+"/")
	}
	return pkg == pattern
}

// importRules reads the table from docs/architecture.md.
func importRules(t *testing.T) []importRule {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(doc), "\n## Who may import what\n")
	require.True(t, ok, "docs/architecture.md has no section \"Who may import what\"")
	table, _, _ = strings.Cut(table, "\n## ")
	code := regexp.MustCompile("`([^`]+)`")
	var rules []importRule
	for i, line := range strings.Split(table, "\n") {
		cols := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if !strings.HasPrefix(strings.TrimSpace(line), "|") || len(cols) != 2 {
			continue
		}
		for i, c := range cols { // a comment in parentheses names no package
			cols[i], _, _ = strings.Cut(c, "(")
		}
		r := importRule{line: i}
		for _, m := range code.FindAllStringSubmatch(cols[0], -1) {
			r.pkgs = append(r.pkgs, m[1])
		}
		if len(r.pkgs) == 0 {
			continue // the header and its rule
		}
		may := strings.TrimSpace(cols[1])
		switch {
		case strings.HasPrefix(may, "anything"):
			r.anything = true
		case strings.HasPrefix(may, "nothing"):
		default:
			for _, m := range code.FindAllStringSubmatch(may, -1) {
				r.may = append(r.may, m[1])
			}
			require.NotEmpty(t, r.may, "docs/architecture.md: the row of %v allows neither packages in `backquotes`, nothing nor anything", r.pkgs)
		}
		rules = append(rules, r)
	}
	require.NotEmpty(t, rules, "docs/architecture.md: no rows in \"Who may import what\"")
	return rules
}

// modulePackages returns the module's packages that have non-test Go files
// (nested modules aside), each with the module's packages it imports.
func modulePackages(t *testing.T) map[string][]string {
	t.Helper()
	const mod = "github.com/idemkey/idemkey/"
	pkgs := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && rel != "." {
				return filepath.SkipDir // a module of its own
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		deps := pkgs[pkg]
		for _, imp := range f.Imports {
			if dep, ours := strings.CutPrefix(strings.Trim(imp.Path.Value, `"`), mod); ours && !slices.Contains(deps, dep) {
				deps = append(deps, dep)
			}
		}
		pkgs[pkg] = deps
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, pkgs, "redisstore", "the walk found the module's packages")
	return pkgs
}

// TestImportRules holds docs/architecture.md's table "Who may import
// what": every package of the module is in exactly one row, every row names
// packages that exist, and no package imports from this module what its
// row does not allow (tests aside).
func TestImportRules(t *testing.T) {
	rules := importRules(t)
	pkgs := modulePackages(t)
	for _, r := range rules {
		for _, p := range append(slices.Clone(r.pkgs), r.may...) {
			found := false
			for pkg := range pkgs {
				found = found || matches(p, pkg)
			}
			require.True(t, found, "docs/architecture.md names %s, which is no package of the module", p)
		}
	}
	names := make([]string, 0, len(pkgs))
	for pkg := range pkgs {
		names = append(names, pkg)
	}
	slices.Sort(names)
	for _, pkg := range names {
		var rows []importRule
		for _, r := range rules {
			if slices.ContainsFunc(r.pkgs, func(p string) bool { return matches(p, pkg) }) {
				rows = append(rows, r)
			}
		}
		require.Len(t, rows, 1, "package %s: docs/architecture.md's table \"Who may import what\" must list it in one row", pkg)
		r := rows[0]
		if r.anything {
			continue
		}
		for _, dep := range pkgs[pkg] {
			allowed := slices.ContainsFunc(r.may, func(p string) bool { return matches(p, dep) })
			require.True(t, allowed, "%s imports %s, which docs/architecture.md does not allow", pkg, dep)
		}
	}
}

func TestMatches(t *testing.T) {
	require.True(t, matches("redisstore", "redisstore"))
	require.False(t, matches("redisstore", "redisstore/internal/record"))
	require.True(t, matches("redisstore/...", "redisstore/internal/record"))
	require.True(t, matches("redisstore/...", "redisstore"))
	require.False(t, matches("redisstore/...", "redisstorex"))
}
