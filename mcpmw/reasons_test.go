package mcpmw

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every reason the middleware answers with is in the README's contract
// table, and every constant of the _meta contract is named there.
func TestReasonsAreDocumented(t *testing.T) {
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	for _, r := range reasons {
		require.Contains(t, string(b), "`"+r+"`", "README.md's contract table lacks %s", r)
	}
	for _, m := range []string{MetaKey, MetaReplayed, MetaRetryAfter, MetaReason, Capability} {
		require.Contains(t, string(b), m)
	}
}
