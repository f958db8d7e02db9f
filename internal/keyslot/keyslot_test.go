package keyslot

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

// Of agrees with CLUSTER KEYSLOT, with and without hash tags.
func TestOfMatchesRedis(t *testing.T) {
	rdb := redistest.StartCluster(t, 3).Client(t)
	ctx := context.Background()
	keys := []string{"", "a", "{}", "{}x", "x{}y", "{a}", "b{a}c", "{a}{b}", "idem:{tag}:t", "{", "}{"}
	for i := range 50 {
		keys = append(keys, fmt.Sprint("idemkey-check-", i))
	}
	for _, key := range keys {
		want, err := rdb.ClusterKeySlot(ctx, key).Result()
		require.NoError(t, err, "%q", key)
		require.EqualValues(t, want, Of(key), "%q", key)
	}
}
