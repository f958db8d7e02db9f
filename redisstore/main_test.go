package redisstore

import (
	"os"
	"testing"

	"github.com/idemkey/idemkey/internal/redistest"
)

// TestMain lets four parallel tests run at once: they start their own
// servers and mostly wait (the package's tests use about a tenth of a core).
func TestMain(m *testing.M) {
	redistest.Parallel(4)
	os.Exit(m.Run())
}
