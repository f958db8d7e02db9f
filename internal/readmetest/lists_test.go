package readmetest

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// goFunc matches a top-level func whose name a test runner knows.
var goFunc = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz|Example)\w*)\(`)

// repoFuncs returns the test, benchmark, fuzz and example funcs of every
// Go file of the repository, every module, by name, each with the
// directories (relative, "./dir") that declare one.
func repoFuncs(t *testing.T) map[string][]string {
	t.Helper()
	funcs := map[string][]string{}
	err := repoGoFiles(func(path string) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		dir := "./" + filepath.ToSlash(rel)
		if rel == "." {
			dir = "."
		}
		for _, m := range goFunc.FindAllSubmatch(b, -1) {
			funcs[string(m[1])] = append(funcs[string(m[1])], dir)
		}
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, funcs, "TestLinksResolve", "the walk finds this package's tests")
	return funcs
}

// TestFuzzTargetsInCI: .ci/run's fuzz pass runs every fuzz target of the
// repository, every module, in the directory that declares it, and names
// none that does not exist. A test rather than a discovery in .ci/run:
// discovery ('go test -list' per package and module) would compile every
// test binary again, without -race, minutes on CI's cores, while this
// costs a walk of the files, and keeps each target's budget explicit.
func TestFuzzTargetsInCI(t *testing.T) {
	script, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	require.NoError(t, err)
	entry := regexp.MustCompile(`(?m)^\s*"(Fuzz\w*) (\./\S*) (\S+)"`)
	listed := map[string]string{}
	for _, m := range entry.FindAllStringSubmatch(string(script), -1) {
		name, dir, budget := m[1], m[2], m[3]
		require.NotContains(t, listed, name+" "+dir, ".ci/run lists %s in %s twice", name, dir)
		listed[name+" "+dir] = budget
		require.Regexp(t, `^[1-9][0-9]*x$`, budget, ".ci/run: %s's budget is not a count (see the comment there)", name)
	}
	require.NotEmpty(t, listed, ".ci/run has no fuzz list")

	declared := map[string]bool{}
	for name, dirs := range repoFuncs(t) {
		if !strings.HasPrefix(name, "Fuzz") {
			continue
		}
		for _, dir := range dirs {
			declared[name+" "+dir] = true
		}
	}
	for _, target := range slices.Sorted(maps.Keys(declared)) {
		require.Contains(t, listed, target, "fuzz target %s is not in .ci/run's fuzz list: add it with a budget", target)
	}
	for target := range listed {
		require.True(t, declared[target], ".ci/run fuzzes %s, which no Go file declares", target)
	}
}

// TestQuotedTestNamesExist: every test, benchmark, fuzz target or example
// the Markdown quotes by name is a func in the repository (any module), so
// that a reader can run it; a name ending in '*' stands for every func it
// starts.
func TestQuotedTestNamesExist(t *testing.T) {
	var docs []string
	for _, pattern := range []string{"*.md", "docs/*.md", "cmd/idemkey/*.md", "bench/*.md", "grpcmw/*.md", "mcpmw/*.md", "prometheus/*.md", "otel/*.md", "storm/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		require.NoError(t, err)
		docs = append(docs, m...)
	}
	err := filepath.WalkDir(filepath.Join(root, "examples"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			docs = append(docs, path)
		}
		return err
	})
	require.NoError(t, err)
	require.NotEmpty(t, docs)

	funcs := repoFuncs(t)
	quoted := regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz|Example)[A-Z_][A-Za-z0-9_]*\*?`)
	n := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		require.NoError(t, err)
		for _, name := range quoted.FindAllString(string(b), -1) {
			n++
			if prefix, ok := strings.CutSuffix(name, "*"); ok {
				found := false
				for f := range funcs {
					found = found || strings.HasPrefix(f, prefix)
				}
				require.True(t, found, "%s quotes %s, and no func starts %s", doc, name, prefix)
				continue
			}
			require.Contains(t, funcs, name, "%s quotes %s, which is no func of the repository", doc, name)
		}
	}
	require.Positive(t, n, "the docs quote no test name")
}

// repoGoFiles calls fn with the path of every Go file of the repository,
// every module, hidden directories, testdata and node_modules aside; it
// stops at fn's first error.
func repoGoFiles(fn func(path string) error) error {
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		return fn(path)
	})
	return err
}
