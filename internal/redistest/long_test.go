package redistest_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

func TestLongSkipMessage(t *testing.T) {
	for _, c := range []struct{ name, dir, want string }{
		{"TestDeployDrill", "./cmd/idemkey",
			"long drill: run with IDEMKEY_LONG=1 go test -race -count=1 -run '^TestDeployDrill$' ./cmd/idemkey (.ci/run sets IDEMKEY_LONG=1)"},
		{"TestClusterFailoverStorm/master_killed", "./internal/faulttest",
			"long drill: run with IDEMKEY_LONG=1 go test -race -count=1 -run '^TestClusterFailoverStorm$/^master_killed$' ./internal/faulttest (.ci/run sets IDEMKEY_LONG=1)"},
		{"TestSentinelFailoverStorm/Replicas=1,_one_replica", ".",
			`long drill: run with IDEMKEY_LONG=1 go test -race -count=1 -run '^TestSentinelFailoverStorm$/^Replicas=1,_one_replica$' . (.ci/run sets IDEMKEY_LONG=1)`},
		{"TestContract/a_dead_instance's_request", "./httpmw",
			`long drill: run with IDEMKEY_LONG=1 go test -race -count=1 -run '^TestContract$/^a_dead_instance'\''s_request$' ./httpmw (.ci/run sets IDEMKEY_LONG=1)`},
	} {
		require.Equal(t, c.want, redistest.LongSkipMessage(c.name, c.dir))
	}
}

// skipRecorder is a testing.TB whose Skip records its message.
type skipRecorder struct {
	testing.TB
	skipped string
}

func (r *skipRecorder) Skip(args ...any) { r.skipped = fmt.Sprint(args...) }

func TestLong(t *testing.T) {
	for _, c := range []struct {
		env  string
		skip bool
	}{{"", true}, {"0", true}, {"1", false}} {
		t.Run("IDEMKEY_LONG="+c.env, func(t *testing.T) {
			t.Setenv(redistest.LongEnv, c.env)
			r := &skipRecorder{TB: t}
			redistest.Long(r)
			if !c.skip {
				require.Empty(t, r.skipped)
				return
			}
			// The test binary runs in the package's directory: the message
			// names it from the module's root.
			require.Equal(t, redistest.LongSkipMessage(t.Name(), "./internal/redistest"), r.skipped)
		})
	}
}

// TestCIRunSetsLong: .ci/run, which CI runs, exports IDEMKEY_LONG=1 before
// its test command, so that every long drill runs there. (It did not: the
// deploy drill's skip message said it did, and CI never ran it.)
func TestCIRunSetsLong(t *testing.T) {
	b, err := os.ReadFile("../../.ci/run")
	require.NoError(t, err)
	script := string(b)
	export := regexp.MustCompile(`(?m)^export IDEMKEY_LONG=1$`).FindStringIndex(script)
	require.NotNil(t, export, ".ci/run does not export IDEMKEY_LONG=1")
	test := strings.Index(script, "\ngo test -race -count=1 -p 4 ./...\n")
	require.Positive(t, test, ".ci/run does not run the README's test command")
	require.Less(t, export[0], test, ".ci/run exports IDEMKEY_LONG=1 after its test command")
}
