package grpcmw

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestClientRetryDecision(t *testing.T) {
	o := ClientOptions{MaxAttempts: 3, MaxRetryAfter: time.Second}.withDefaults()
	withInfo := func(c codes.Code, d time.Duration) error {
		st, err := status.New(c, "x").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
		require.NoError(t, err)
		return st.Err()
	}
	for _, tc := range []struct {
		name  string
		err   error
		retry bool
		delay time.Duration // -1: backoff, any delay below BaseDelay
	}{
		{"aborted with RetryInfo", withInfo(codes.Aborted, 250*time.Millisecond), true, 250 * time.Millisecond},
		{"RetryInfo capped", withInfo(codes.Unavailable, time.Hour), true, time.Second},
		{"unavailable, backoff", status.Error(codes.Unavailable, "x"), true, -1},
		{"deadline without AttemptTimeout", status.Error(codes.DeadlineExceeded, "x"), false, 0},
		{"final", status.Error(codes.FailedPrecondition, "x"), false, 0},
		{"plain error", errors.New("x"), false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := o.retry(tc.err, 1)
			require.Equal(t, tc.retry, ok)
			if tc.delay >= 0 {
				require.Equal(t, tc.delay, d)
			} else {
				require.Less(t, d, o.BaseDelay)
			}
		})
	}
	o.AttemptTimeout = time.Second
	_, ok := o.retry(status.Error(codes.DeadlineExceeded, "x"), 1)
	require.True(t, ok, "an attempt that ran out of AttemptTimeout")
	for range 100 {
		d, _ := o.retry(status.Error(codes.Unavailable, "x"), 30)
		require.Less(t, d, o.MaxDelay)
	}
}

func TestClientBudget(t *testing.T) {
	b := &budget{o: BudgetOptions{Burst: 2, Ratio: 0.5, PerSecond: 1}, targets: map[string]*bucket{}}
	now := time.Unix(1000, 0)
	require.True(t, b.withdraw("a", now))
	require.True(t, b.withdraw("a", now))
	require.False(t, b.withdraw("a", now), "empty")
	require.True(t, b.withdraw("b", now), "targets apart")
	b.deposit("a", now)
	require.False(t, b.withdraw("a", now), "half a token")
	b.deposit("a", now)
	require.True(t, b.withdraw("a", now))
	require.True(t, b.withdraw("a", now.Add(time.Second)), "time refills")
	require.False(t, b.withdraw("a", now.Add(time.Second)))
}
