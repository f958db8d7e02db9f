package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"

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
