package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The generator comparison's harness: both generators send what they were
// asked to, and the table shows storm's CPU ratio.
func TestGenerators(t *testing.T) {
	url, err := ServeTrivial(t.Context())
	require.NoError(t, err)
	for _, run := range []func() (GenResult, error){
		func() (GenResult, error) { return RunStormGen(t.Context(), url, 200, 300*time.Millisecond) },
		func() (GenResult, error) { return RunVegetaGen(t.Context(), url, 200, 300*time.Millisecond, false) },
		func() (GenResult, error) { return RunVegetaGen(t.Context(), url, 200, 300*time.Millisecond, true) },
	} {
		r, err := run()
		require.NoError(t, err)
		require.Equal(t, 60, r.Sent, r.Generator)
		require.Zero(t, r.Errors, r.Generator)
		require.Positive(t, r.Achieved, r.Generator)
	}
	table := GenTable([]GenRow{
		{GenResult: GenResult{Generator: "storm", Rate: 1000, Sent: 5000, Achieved: 999}, CPUPerRequest: 60 * time.Microsecond, VegetaCPU: 50 * time.Microsecond},
		{GenResult: GenResult{Generator: "vegeta", Rate: 1000, Sent: 5000, Achieved: 999}, CPUPerRequest: 50 * time.Microsecond},
	})
	require.Contains(t, table, "| 1000/s | storm | 5000 | 0.9990 |")
	require.Contains(t, table, "**1.20**")
	require.Equal(t, 4, strings.Count(table, "\n"))
}
