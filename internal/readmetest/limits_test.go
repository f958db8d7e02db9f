package readmetest

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The limits on the library's shape (small files, a small redisstore).
const (
	maxFileLines       = 500  // no non-test Go file of the library is longer
	maxRedisstoreLines = 2000 // redisstore's non-test lines outside its internal packages stay under it
	maxReadmeLines     = 250  // README.md is a front door, not a manual
)

// overLimit are the files allowed over maxFileLines for now, each with who
// takes it under. An entry for a file no longer over the limit fails: take
// it out.
var overLimit = map[string]string{}

// generated matches the line that marks a generated Go file. Generated
// files are not counted: their length follows their generator's input
// (ginmw's and httpcore's options follow httpmw/options.go), and the
// generator is what is read and reviewed.
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// libraryFiles returns the non-test, non-generated Go files of the
// library, relative to the repository, with their lengths in lines: the
// files a user's program compiles when it imports a public package of
// this module or of a nested library module (libraryModules), that is
// those packages and every package of this repository they depend on.
// Commands, examples and test helpers are not the library.
func libraryFiles(t *testing.T) map[string]int {
	t.Helper()
	abs, err := filepath.Abs(root)
	require.NoError(t, err)
	goList := func(dir string, args ...string) string {
		cmd := exec.Command("go", append([]string{"list"}, args...)...)
		cmd.Dir = filepath.Join(abs, dir)
		out, err := cmd.Output()
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		require.NoError(t, err, "go list %s in %s:\n%s", strings.Join(args, " "), dir, stderr)
		return string(out)
	}
	files := map[string]int{}
	for _, dir := range append([]string{"."}, slices.Sorted(maps.Keys(libraryModules))...) {
		if _, err := os.Stat(filepath.Join(abs, dir, "go.mod")); os.IsNotExist(err) {
			continue // a module still to come
		}
		var public []string
		for _, p := range strings.Fields(goList(dir, "-f", "{{.ImportPath}}:{{.Name}}", "./...")) {
			path, name, _ := strings.Cut(p, ":")
			if name == "main" || strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal") ||
				strings.Contains(path, "/cmd/") || strings.Contains(path, "/examples/") {
				continue
			}
			public = append(public, path)
		}
		require.NotEmpty(t, public, "no public package in %s", dir)
		deps := goList(dir, append([]string{"-deps", "-f", `{{if .Module}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{"\n"}}{{end}}`}, public...)...)
		for line := range strings.Lines(deps) {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			rel, err := filepath.Rel(abs, f[0])
			require.NoError(t, err)
			if strings.HasPrefix(rel, "..") {
				continue // another module's, from the module cache
			}
			for _, name := range f[1:] {
				path := filepath.ToSlash(filepath.Join(rel, name))
				b, err := os.ReadFile(filepath.Join(abs, path))
				require.NoError(t, err)
				if !generated.Match(b) {
					files[path] = bytes.Count(b, []byte("\n"))
				}
			}
		}
	}
	return files
}

// TestLibraryFileLengths holds the library's limits: no file of the library
// over maxFileLines, and redisstore's own files (its internal packages
// aside) under maxRedisstoreLines together. Rerun by hand:
//
//	find redisstore -maxdepth 1 -name '*.go' ! -name '*_test.go' | xargs wc -l
func TestLibraryFileLengths(t *testing.T) {
	files := libraryFiles(t)
	for _, want := range []string{"redisstore/store.go", "redisstore/internal/record/record.go", "internal/httpcore/core.go", "lua/lua.go", "idemkeytest/idemkeytest.go", "grpcmw/server.go", "mcpmw/server.go", "prometheus/prometheus.go", "otel/otel.go"} {
		if _, err := os.Stat(filepath.Join(root, want)); err == nil {
			require.Contains(t, files, want, "the library's files are listed")
		}
	}
	redisstore := 0
	for _, path := range slices.Sorted(maps.Keys(files)) {
		n := files[path]
		if filepath.Dir(path) == "redisstore" {
			redisstore += n
		}
		if why, ok := overLimit[path]; ok {
			require.Greater(t, n, maxFileLines, "%s is %d lines, within the limit: take it out of overLimit", path, n)
			t.Logf("%s: %d lines, over %d (%s)", path, n, maxFileLines, why)
			continue
		}
		require.LessOrEqual(t, n, maxFileLines, "%s is %d lines: split it (by what its parts do)", path, n)
	}
	for path := range overLimit {
		require.Contains(t, files, path, "overLimit names %s, which is not a library file", path)
	}
	t.Logf("%d library files; redisstore outside its internal packages: %d lines", len(files), redisstore)
	require.Less(t, redisstore, maxRedisstoreLines,
		"redisstore's own files (internal packages aside) are %d lines: move mechanism and formats into its internal packages", redisstore)
}

// TestReadmeLength: README.md stays a front door.
func TestReadmeLength(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	n := bytes.Count(b, []byte("\n"))
	require.LessOrEqual(t, n, maxReadmeLines, "README.md is %d lines: move detail to docs/", n)
}
