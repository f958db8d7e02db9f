package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRun(t *testing.T) {
	var out strings.Builder
	require.NoError(t, run(&out, "", 3))
	s := out.String()
	require.Contains(t, s, "3 payments, 3 provider charges, 3 answers lost and replayed")
	require.Regexp(t, regexp.MustCompile(`payment 1: ch_\S+ amount 1000, replayed true`), s)
	require.Contains(t, s, `declined: FailedPrecondition "card declined: amount over the limit"; its retry: FailedPrecondition, replayed true`)
	require.Contains(t, s, "the same key for another amount: FailedPrecondition (KEY_REUSED)")
}
