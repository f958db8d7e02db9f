package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// replyErr is an error reply from Redis, as go-redis returns it.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

var _ redis.Error = replyErr("")

// TestPersist: the store's own answers end a write's tries, as Redis's
// do (script.TestPersist has the rest); failures to reach Redis do not.
func TestPersist(t *testing.T) {
	ctx := context.Background()
	down := errors.New("dial tcp: connection refused")
	tests := []struct {
		name      string
		errs      []error // returned by successive tries; the last repeats
		wantTries int
		wantErr   error
	}{
		{"unreachable, then back", []error{down, down, nil}, 3, nil},
		{"lease lost is final", []error{ErrLeaseLost}, 1, ErrLeaseLost},
		{"an unexpected reply is final", []error{fmt.Errorf("%w: x", ErrUnexpectedReply)}, 1, ErrUnexpectedReply},
		{"too few replicas is final", []error{&ReplicationError{Acked: 0, Want: 1}}, 1, ErrNotReplicated},
		{"script error is final", []error{replyErr("WRONGTYPE Operation against a key")}, 1, replyErr("WRONGTYPE Operation against a key")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tries := 0
			err := persist(ctx, func() error {
				e := tt.errs[min(tries, len(tt.errs)-1)]
				tries++
				return e
			})
			require.Equal(t, tt.wantTries, tries)
			if tt.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.wantErr)
			}
		})
	}
}

// TestNoSignOfLifePastMaxDuration: once MaxDuration has cut a run off, its
// lease is not pushed out again, however the run goes on: Extend returns
// ErrMaxDuration and sends nothing, and Checkpoint still records the
// recovery point (the takeover needs it) but keeps the record's TTL. So a
// stuck run that keeps checkpointing is taken over once its lease runs
// out, as attempt 2 from its last checkpoint. Both used to reset the
// record's TTL, and a run checkpointing in a loop held its key for ever.
func TestNoSignOfLifePastMaxDuration(t *testing.T) {
	const lease = 2 * time.Second // roomy: the test waits for half of it to pass
	b := realBackend(t)
	s := newStore(t, b, Options{Lease: lease, MaxDuration: 50 * time.Millisecond})
	ctx := context.Background()
	req := newReq(t)
	c, err := s.Claim(ctx, req)
	require.NoError(t, err)
	l := c.Lease
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := l.Supervise(cancel)
	defer stop()
	<-fctx.Done()
	require.ErrorIs(t, context.Cause(fctx), ErrMaxDuration)

	leaseLeft := func() time.Duration {
		rec, err := s.Lookup(ctx, req.Scope, req.Key)
		require.NoError(t, err)
		return rec.LeaseTTL
	}
	// Well into the lease, so that pushing it out would show.
	require.Eventually(t, func() bool { return leaseLeft() < lease/2 }, 10*time.Second, 5*time.Millisecond)
	before := leaseLeft()

	require.ErrorIs(t, l.Extend(ctx), ErrMaxDuration)
	require.NoError(t, l.Checkpoint(ctx, "charged", []byte("ch_1")), "the point is recorded")
	after := leaseLeft()
	require.LessOrEqual(t, after, before, "the lease was pushed out past MaxDuration")
	rec, err := s.Lookup(ctx, req.Scope, req.Key)
	require.NoError(t, err)
	require.Equal(t, "charged", rec.RecoveryPoint)

	b.expireLease(t, s, req)
	taken, err := s.Claim(ctx, req)
	require.NoError(t, err)
	require.Equal(t, TookOver, taken.Status)
	require.Equal(t, 2, taken.Lease.Attempt)
	require.Equal(t, "charged", taken.Lease.RecoveryPoint)
	require.ErrorIs(t, l.Checkpoint(ctx, "late", nil), ErrLeaseLost)
}
