package redistest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// LongEnv is the environment variable that runs the long drills: failover
// storms, the deploy drill, the pipelined copies of the fault suite. Set to
// 1 it runs them; .ci/run sets it, so CI runs every test.
const LongEnv = "IDEMKEY_LONG"

// IsLong reports whether the environment asks for the long drills
// (IDEMKEY_LONG=1).
func IsLong() bool { return os.Getenv(LongEnv) == "1" }

// Long skips a long drill unless IDEMKEY_LONG=1, with a message that gives
// the command which runs it: the default go test ./... stays short, and no
// drill is skipped without saying how to run it. Call it first in the test
// or subtest, before starting any server.
func Long(t testing.TB) {
	t.Helper()
	if IsLong() {
		return
	}
	t.Skip(LongSkipMessage(t.Name(), packageDir()))
}

// LongSkipMessage is the message Long skips test name (t.Name()) of the
// package in dir (as "./internal/faulttest") with.
func LongSkipMessage(name, dir string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	run := strings.ReplaceAll(strings.Join(parts, "/"), "'", `'\''`)
	return "long drill: run with " + LongEnv + "=1 go test -race -count=1 -run '" + run + "' " + dir +
		" (.ci/run sets " + LongEnv + "=1)"
}

// packageDir returns the directory of the package under test (go test runs
// a test binary in it) relative to its module's root, as "./cmd/idemkey",
// or "." if the root is not found.
func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil || rel == "." {
				return "."
			}
			return "./" + filepath.ToSlash(rel)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "."
		}
		dir = parent
	}
}
