package readmetest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestImportRules holds docs/architecture.md's table: which packages of
// this module each package may import (tests aside).
func TestImportRules(t *testing.T) {
	const mod = "github.com/idemkey/idemkey/"
	allowed := map[string][]string{
		"lua":               {},
		"observe":           {},
		"idemclient":        {},
		"internal/keyslot":  {},
		"redisstore":        {"lua", "observe", "internal/keyslot"},
		"internal/httpcore": {"redisstore", "observe", "internal/canon"},
		"httpmw":            {"internal/httpcore", "redisstore"},
		"ginmw":             {"internal/httpcore", "redisstore", "httpmw"},
		"internal/storm":    {"idemclient", "internal/loadgen", "internal/httpflag"},
		"internal/loadgen":  {},
	}
	for pkg, may := range allowed {
		files, err := filepath.Glob(filepath.Join(root, pkg, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, files, pkg)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
			require.NoError(t, err)
			for _, imp := range af.Imports {
				path := strings.Trim(imp.Path.Value, `"`)
				dep, ours := strings.CutPrefix(path, mod)
				if !ours {
					continue
				}
				require.Contains(t, may, dep, "%s imports %s, which docs/architecture.md does not allow", f, path)
			}
		}
	}
}
