package script

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPersist(t *testing.T) {
	ctx := context.Background()
	down := errors.New("dial tcp: connection refused")
	mine := errors.New("the caller's final answer")
	final := func(err error) bool { return errors.Is(err, mine) }
	tests := []struct {
		name      string
		errs      []error // returned by successive tries; the last repeats
		wantTries int
		wantErr   error
	}{
		{"success", []error{nil}, 1, nil},
		{"unreachable, then back", []error{down, down, nil}, 3, nil},
		{"loading after a restart", []error{fmt.Errorf("x: %w", replyError("LOADING Redis is loading")), nil}, 2, nil},
		{"cluster down", []error{replyError("CLUSTERDOWN The cluster is down"), nil}, 2, nil},
		{"the caller's final answer", []error{fmt.Errorf("x: %w", mine)}, 1, mine},
		{"script error is final", []error{replyError("WRONGTYPE Operation against a key")}, 1, replyError("WRONGTYPE Operation against a key")},
		{"gives up after 40 tries", []error{down}, PersistTries, down},
	}
	noWait := func(context.Context, time.Duration) bool { return true }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tries := 0
			err := persist(ctx, noWait, final, func() error {
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
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			tries := 0
			start := time.Now()
			err := Persist(ctx, func() error { tries++; return down })
			require.ErrorIs(t, err, down)
			// Tries at 0, 10ms and 30ms; the wait for the fourth, at
			// 70ms, ends with the context.
			require.Equal(t, 3, tries)
			require.Equal(t, 50*time.Millisecond, time.Since(start))
		})
	})
}

// TestHandBackWaitsOutAnOutage: a claim handed back while Redis refuses
// connections sends no release (it could not reach Redis) until Redis
// answers again; then it releases, once. Time is synctest's.
func TestHandBackWaitsOutAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var down atomic.Bool
		down.Store(true)
		refusal := func() error {
			if down.Load() {
				return errors.New("refused")
			}
			return nil
		}
		var releases atomic.Int32
		HandBack(time.Second, refusal, func(context.Context) bool { releases.Add(1); return true })
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		require.Zero(t, releases.Load(), "a release sent while Redis refuses")
		down.Store(false)
		time.Sleep(outageProbe)
		synctest.Wait()
		require.EqualValues(t, 1, releases.Load())
	})
}
