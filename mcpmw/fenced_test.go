package mcpmw_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/mcpmw"
	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/redisstore"
)

// pauseScripts is a client hook that, once paused, holds every script call
// (the heartbeat's extends among them) until resumed or its context ends:
// the process stands still for Redis, as one stopped by SIGSTOP or a long
// GC pause, and its lease runs out on Redis's clock.
type pauseScripts struct {
	paused  atomic.Bool
	resumed chan struct{}
}

func newPauseScripts() *pauseScripts { return &pauseScripts{resumed: make(chan struct{})} }

func (p *pauseScripts) pause()  { p.paused.Store(true) }
func (p *pauseScripts) resume() { p.paused.Store(false); close(p.resumed) }

func (p *pauseScripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *pauseScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.HasPrefix(cmd.Name(), "eval") && p.paused.Load() {
			select {
			case <-p.resumed:
			case <-ctx.Done():
				cmd.SetErr(ctx.Err())
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}
func (p *pauseScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A run paused past its lease, whose key another attempt took over and
// completed meanwhile, must not answer its own result when it resumes: its
// Complete is fenced, and the key's one answer is the other attempt's. Its
// caller gets what a duplicate gets while the key is in progress (the
// REQUEST_IN_PROGRESS tool error with retryAfterMs), and its retry with the
// same key gets the stored result. The middleware used to send the fenced
// run's own result, so that caller held an answer no retry would ever give.
func TestFencedRunAnswersInProgressNotItsOwnResult(t *testing.T) {
	bothTransports(t, func(t *testing.T, tr transport) {
		paused, resume := make(chan struct{}), make(chan struct{})
		hold := newPauseScripts()
		send := func(ctx context.Context, _ *mcp.CallToolRequest, _ emailIn) (*mcp.CallToolResult, emailOut, error) {
			a := mcpmw.Attempt(ctx)
			if a == 1 {
				hold.pause() // the heartbeat of this run stops reaching Redis
				close(paused)
				<-resume // the run does its work, unaware of its lost lease
			}
			return nil, emailOut{ID: "msg_attempt_" + strconv.Itoa(a), Attempt: a}, nil
		}
		var fenced atomic.Int64
		a := start(t, tr, setup{hook: hold, email: send, store: redisstore.Options{Lease: 300 * time.Millisecond,
			Observer: observe.Func{OnEvent: func(_ context.Context, e *observe.Event) {
				if e.Kind == observe.Fenced {
					fenced.Add(1)
				}
			}}}})
		// The other instance waits for the key rather than answering "in
		// progress": it takes the key over once the paused lease runs out.
		b := start(t, tr, setup{redis: a.redis, email: send, server: mcpmw.Options{Wait: 20 * time.Second}})
		ctx := ctxT(t, 30*time.Second)
		as, bs := a.connect("alice"), b.connect("alice")

		type reply struct {
			res *mcp.CallToolResult
			err error
		}
		first := make(chan reply, 1)
		go func() { res, err := email(ctx, as, "key-fenced", ann("hello")); first <- reply{res, err} }()
		<-paused
		second, err := email(ctx, bs, "key-fenced", ann("hello"))
		require.NoError(t, err)
		require.False(t, second.IsError, text(second))
		require.False(t, mcpmw.Replayed(second))
		require.Equal(t, emailOut{ID: "msg_attempt_2", Attempt: 2}, structured(t, second), "attempt 2 took the key over and stored its result")

		hold.resume()
		close(resume)
		got := <-first
		require.NoError(t, got.err)
		require.True(t, got.res.IsError, "the fenced run's own result went out: %v", got.res.StructuredContent)
		require.Equal(t, mcpmw.ReasonInProgress, mcpmw.Reason(got.res, nil))
		delay, ok := mcpmw.RetryAfter(got.res)
		require.True(t, ok, "retryAfterMs")
		require.Positive(t, delay)
		require.EqualValues(t, 1, fenced.Load(), "the run's Complete was fenced")

		retry, err := email(ctx, as, "key-fenced", ann("hello"))
		require.NoError(t, err)
		require.True(t, mcpmw.Replayed(retry))
		require.Equal(t, emailOut{ID: "msg_attempt_2", Attempt: 2}, structured(t, retry), "the key's one answer: attempt 2's")
	})
}
