package grpcmw_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkey/idemkey/grpcmw"
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
// completed meanwhile, must not answer its own outcome when it resumes: its
// Complete is fenced, and the key's one answer is the other attempt's. Its
// caller gets what a duplicate gets while the key is in progress (Aborted
// REQUEST_IN_PROGRESS with RetryInfo), and its retry with the same key gets
// the stored outcome. The interceptor used to return the fenced run's own
// response, so that caller held an answer no retry would ever give.
func TestFencedRunAnswersInProgressNotItsOwnOutcome(t *testing.T) {
	paused, resume := make(chan struct{}), make(chan struct{})
	fn := func(ctx context.Context, _ *structpb.Struct) (*structpb.Struct, error) {
		a := grpcmw.Attempt(ctx)
		if a == 1 {
			close(paused)
			<-resume // the run does its work, unaware of its lost lease
		}
		return structpb.NewStruct(map[string]any{"charged_by_attempt": float64(a)})
	}
	var fenced atomic.Int64
	hold := newPauseScripts()
	a := start(t, func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
		hold.pause() // the heartbeat of this run stops reaching Redis
		return fn(ctx, in)
	}, setup{hook: hold, store: redisstore.Options{Lease: 300 * time.Millisecond, Observer: observe.Func{OnEvent: func(_ context.Context, e *observe.Event) {
		if e.Kind == observe.Fenced {
			fenced.Add(1)
		}
	}}}})
	// The other instance waits for the key rather than hearing "in
	// progress": it takes the key over once the paused lease runs out.
	b := start(t, fn, setup{redis: a.redis, server: grpcmw.Options{Wait: 20 * time.Second}})
	ctx := ctxT(t, 30*time.Second)
	in := req(t, map[string]any{"amount": 1})

	first := make(chan answer, 1)
	go func() { first <- a.call(ctx, "k-fenced", in) }()
	<-paused
	second := b.call(ctx, "k-fenced", in)
	require.NoError(t, second.err)
	require.False(t, second.replayed())
	require.Equal(t, float64(2), second.resp.Fields["charged_by_attempt"].GetNumberValue(), "attempt 2 took the key over and stored its outcome")

	hold.resume()
	close(resume)
	got := <-first
	require.Equal(t, codes.Aborted, status.Code(got.err), "the fenced run's own response went out: %v", got.resp)
	require.Equal(t, grpcmw.ReasonInProgress, reason(got.err))
	delay, ok := retryInfo(got.err)
	require.True(t, ok, "RetryInfo")
	require.Positive(t, delay)
	require.EqualValues(t, 1, fenced.Load(), "the run's Complete was fenced")

	retry := a.call(ctx, "k-fenced", in)
	require.NoError(t, retry.err)
	require.True(t, retry.replayed())
	require.Equal(t, float64(2), retry.resp.Fields["charged_by_attempt"].GetNumberValue(), "the key's one answer: attempt 2's")
}
