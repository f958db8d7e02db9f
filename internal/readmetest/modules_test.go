package readmetest

import (
	"encoding/json"
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

// libraryModules are the nested modules a user can 'go get': they must
// build from the main module's public packages alone, at a released
// version. (bench/ is not one: it is never published.) Those marked true
// import only stdlib-only packages of the core, so that no internal package
// of the core is even among their dependencies: the evidence that they are
// publishable. grpcmw and mcpmw build on redisstore, whose internal
// packages are its own (and mcpmw on jsoncanon, the public face of
// internal/canon).
var libraryModules = map[string]bool{"prometheus": true, "otel": true, "grpcmw": false, "mcpmw": false}

// internalOf reports whether pkg is an internal package of the module mod.
func internalOf(mod, pkg string) bool {
	rest, ok := strings.CutPrefix(pkg, mod+"/")
	return ok && (strings.HasPrefix(rest, "internal/") || strings.Contains(rest, "/internal/"))
}

// TestLibraryModulesArePublishable holds the evidence, which anyone
// can rerun by hand with 'go list -deps ./...' and 'go mod edit -json' in
// each nested library module: no package of the module imports an internal
// package of the main module (whose API no release keeps: a user's build
// would take whatever the version MVS picks has), prometheus's and otel's
// dependencies hold none at all, and each go.mod requires the main module
// at a version the changelog names, not v0.0.0 (which only the development
// replace makes work). Their tests may still use the main module's internal
// test helpers (docs/architecture.md says why): only the packages' own
// imports are checked, not their tests'.
func TestLibraryModulesArePublishable(t *testing.T) {
	const mod = "github.com/idemkey/idemkey"
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	require.NoError(t, err)
	released := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (\d+\.\d+\.\d+)\b`).FindAllStringSubmatch(string(changelog), -1) {
		released["v"+m[1]] = true
	}
	require.NotEmpty(t, released, "CHANGELOG.md names no release")

	found := 0
	for _, dir := range slices.Sorted(maps.Keys(libraryModules)) {
		path := filepath.Join(root, dir)
		if _, err := os.Stat(filepath.Join(path, "go.mod")); os.IsNotExist(err) {
			continue // a module still to come
		}
		found++
		t.Run(dir, func(t *testing.T) {
			cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
			cmd.Dir = path
			out, err := cmd.Output()
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			require.NoError(t, err, "go list -deps ./... in %s:\n%s", dir, stderr)
			var deps []string
			for line := range strings.Lines(string(out)) {
				f := strings.Fields(line)
				deps = append(deps, f[0])
				if !strings.HasPrefix(f[0], mod+"/"+dir) {
					continue
				}
				for _, imp := range f[1:] {
					require.False(t, internalOf(mod, imp), "%s imports %s, an internal package of the core", f[0], imp)
				}
			}
			require.Contains(t, deps, mod+"/observe", "the list is of %s's packages", dir)
			if libraryModules[dir] {
				for _, p := range deps {
					require.False(t, strings.HasPrefix(p, mod+"/internal/"), "%s depends on %s", dir, p)
				}
			}

			cmd = exec.Command("go", "mod", "edit", "-json")
			cmd.Dir = path
			out, err = cmd.Output()
			require.NoError(t, err)
			var gomod struct {
				Require []struct{ Path, Version string }
				Replace []struct {
					Old, New struct{ Path, Version string }
				}
			}
			require.NoError(t, json.Unmarshal(out, &gomod))
			version := ""
			for _, r := range gomod.Require {
				if r.Path == mod {
					version = r.Version
				}
			}
			require.NotEmpty(t, version, "%s/go.mod does not require %s", dir, mod)
			require.False(t, strings.HasPrefix(version, "v0.0.0"), "%s/go.mod requires %s %s: no such release", dir, mod, version)
			require.True(t, released[version], "%s/go.mod requires %s %s, which CHANGELOG.md does not name", dir, mod, version)
			// The replace, for development in this repository, stays.
			require.Len(t, gomod.Replace, 1, dir)
			require.Equal(t, mod, gomod.Replace[0].Old.Path)
			require.Equal(t, "../", gomod.Replace[0].New.Path)
		})
	}
	require.NotZero(t, found, "no library module found")
}
