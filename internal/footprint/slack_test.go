package footprint

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestJemallocSize(t *testing.T) {
	for n, want := range map[int]int{1: 8, 9: 16, 100: 112, 128: 128, 129: 160, 1000: 1024, 1091: 1280, 16451: 20480, 4097: 5120} {
		require.Equal(t, want, jemallocSize(n), "n=%d", n)
	}
}
