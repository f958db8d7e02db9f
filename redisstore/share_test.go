package redisstore

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// holdScript is a client hook that, once armed, holds the next script call
// (EVALSHA or EVAL) until released: the test then knows that call is in
// flight, and what waits for it.
type holdScript struct {
	armed    atomic.Bool
	entered  chan struct{} // closed when the held call arrives
	released chan struct{} // closed by release
}

func newHoldScript() *holdScript {
	return &holdScript{entered: make(chan struct{}), released: make(chan struct{})}
}

func (h *holdScript) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *holdScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.HasPrefix(cmd.Name(), "eval") && h.armed.CompareAndSwap(true, false) {
			close(h.entered)
			<-h.released
		}
		return next(ctx, cmd)
	}
}
func (h *holdScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// hold arms the hook: the next script call waits for release.
func (h *holdScript) hold() { h.armed.Store(true) }

// release lets the held call go.
func (h *holdScript) release() { close(h.released) }

// waitFollowers waits until n callers wait for the claim of req's key in
// s's in-process collapse.
func waitFollowers(t *testing.T, s *Store, req Request, n int) {
	t.Helper()
	key := s.keys(req.Scope, req.Key).Record()
	require.Eventually(t, func() bool { return s.flights.Waiting(key) >= n }, 10*time.Second, time.Millisecond,
		"the followers did not join the flight")
}

// TestConcurrentReplaysOwnTheirData: concurrent Do calls of a completed key
// share one claim in this process (one reaches Redis), and each gets data
// of its own, as Result.Data's doc says: an edit of one result shows in no
// other. The collapse used to hand every follower the leader's slice (one
// caller's edit showed in all 16 results, and writing it was a data race).
func TestConcurrentReplaysOwnTheirData(t *testing.T) {
	for name, newBackend := range map[string]func(*testing.T) backend{"redis": realBackend, "miniredis": miniBackend} {
		t.Run(name, func(t *testing.T) {
			b := newBackend(t)
			client := b.newClient(t).(*redis.Client)
			hold := newHoldScript()
			client.AddHook(hold)
			s := newStore(t, backend{client: client}, Options{}) // collapse on, no replay cache: the defaults
			ctx := context.Background()
			req := newReq(t)
			_, err := s.Do(ctx, req, func(context.Context, *Lease) ([]byte, error) { return []byte("charge ch_1"), nil })
			require.NoError(t, err)

			const n = 16
			results := make([]*Result, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			hold.hold()
			do := func(i int) {
				results[i], errs[i] = s.Do(ctx, req, func(context.Context, *Lease) ([]byte, error) {
					panic("a completed key ran again")
				})
				if errs[i] == nil {
					results[i].Data[0] = byte('a' + i) // each caller edits its own result
				}
			}
			wg.Go(func() { do(0) }) // the leader, held in its claim
			<-hold.entered
			for i := 1; i < n; i++ {
				wg.Go(func() { do(i) })
			}
			waitFollowers(t, s, req, n-1)
			hold.release()
			wg.Wait()
			for i := range n {
				require.NoError(t, errs[i])
				require.True(t, results[i].Replayed)
				require.Equal(t, string(rune('a'+i))+"harge ch_1", string(results[i].Data), "result %d shows another caller's edit", i)
			}
		})
	}
}
