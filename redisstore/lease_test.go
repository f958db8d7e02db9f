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

func TestPersist(t *testing.T) {
	ctx := context.Background()
	down := errors.New("dial tcp: connection refused")
	tests := []struct {
		name      string
		errs      []error // returned by successive tries; the last repeats
		wantTries int
		wantErr   error
	}{
		{"success", []error{nil}, 1, nil},
		{"unreachable, then back", []error{down, down, nil}, 3, nil},
		{"loading after a restart", []error{fmt.Errorf("x: %w", replyErr("LOADING Redis is loading")), nil}, 2, nil},
		{"cluster down", []error{replyErr("CLUSTERDOWN The cluster is down"), nil}, 2, nil},
		{"lease lost is final", []error{ErrLeaseLost}, 1, ErrLeaseLost},
		{"script error is final", []error{replyErr("WRONGTYPE Operation against a key")}, 1, replyErr("WRONGTYPE Operation against a key")},
		{"gives up after 40 tries", []error{down}, persistTries, down},
	}
	noWait := func(context.Context, time.Duration) bool { return true }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tries := 0
			err := persistWith(ctx, noWait, func() error {
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

	t.Run("stops when the context is done", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		tries := 0
		start := time.Now()
		err := persist(ctx, func() error { tries++; return down })
		require.ErrorIs(t, err, down)
		require.Less(t, tries, 8)
		require.Less(t, time.Since(start), time.Second)
	})
}
