package record

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetentionArgs(t *testing.T) {
	ms, threshold, tomb := RetentionArgs(24*time.Hour, 10*time.Second, time.Hour)
	require.Equal(t, []string{"86400000", "86390000", "90000000"}, []string{ms, threshold, tomb})
}

func TestRetentionProblem(t *testing.T) {
	lease, maxDur := 10*time.Second, time.Minute
	for _, tc := range []struct {
		d       time.Duration
		maxDur  time.Duration
		problem string
	}{
		{0, maxDur, ""},
		{-time.Second, 0, "negative retention -1s"},
		{lease, 0, "retention 10s does not exceed the store's lease 10s"},
		{lease + time.Millisecond - 1, 0, "retention 10.000999999s does not exceed the store's lease 10s"},
		{lease + time.Millisecond, 0, ""},
		{maxDur, maxDur, "retention 1m0s does not exceed the store's max duration 1m0s"},
		{maxDur + time.Millisecond, maxDur, ""},
		{time.Hour, 0, ""},
	} {
		require.Equal(t, tc.problem, RetentionProblem(tc.d, lease, tc.maxDur), "%v", tc.d)
	}
}
