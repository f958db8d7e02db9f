package redistest_test

import (
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

// parallelGiven is the -parallel of the command line, "" without one.
var parallelGiven string

func TestMain(m *testing.M) {
	flag.Parse()
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			parallelGiven = f.Value.String()
		}
	})
	redistest.Parallel(4)
	os.Exit(m.Run())
}

// TestParallel: Parallel sets -parallel's default, and leaves a -parallel
// given on the command line alone.
func TestParallel(t *testing.T) {
	want := "4"
	if parallelGiven != "" {
		want = parallelGiven
	}
	require.Equal(t, want, flag.Lookup("test.parallel").Value.String())
}
