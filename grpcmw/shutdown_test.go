package grpcmw_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkey/idemkey/grpcmw"
)

// A graceful stop, in the documented order: once Shutdown is done a new
// call is refused with Unavailable SHUTTING_DOWN, nothing claimed; a
// running call that finishes within ShutdownGrace stores its outcome; one
// still running then is cancelled with cause ErrShutdown, its record kept,
// and its retry, on another instance, takes it over as attempt 2 from its
// checkpoint. The handlers honour their contexts, so that a cancellation
// before the grace would show.
func TestShutdownGrace(t *testing.T) {
	const grace = 2 * time.Second
	var runs counter
	finish := make(chan struct{})   // lets the "quick" call finish
	started := make(chan string, 4) // keys as their first attempt starts
	type cut struct {
		cause error
		after time.Time
	}
	cuts := make(chan cut, 1)
	attempts := make(chan int, 4) // the "slow" key's attempts
	fn := func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
		key := grpcmw.Key(ctx)
		switch {
		case key == "quick":
			runs.inc()
			started <- key
			select {
			case <-finish:
				return structpb.NewStruct(map[string]any{"charge": "ch_quick"})
			case <-ctx.Done():
				return nil, status.Error(codes.Unavailable, "cut off")
			}
		case key == "slow" && grpcmw.Attempt(ctx) == 1:
			runs.inc()
			attempts <- 1
			if err := grpcmw.Checkpoint(ctx, "charged", []byte("ch_slow")); err != nil {
				return nil, err
			}
			started <- key
			<-ctx.Done() // never finishes on its own
			cuts <- cut{context.Cause(ctx), time.Now()}
			return nil, status.FromContextError(ctx.Err()).Err()
		case key == "slow":
			attempts <- grpcmw.Attempt(ctx)
			p, d := grpcmw.RecoveryPoint(ctx)
			return structpb.NewStruct(map[string]any{"charge": string(d), "resumed_from": p})
		}
		runs.inc()
		return structpb.NewStruct(map[string]any{"charge": "ch_" + key})
	}
	stopping, stop := context.WithCancel(context.Background())
	defer stop()
	h := start(t, fn, setup{server: grpcmw.Options{Shutdown: stopping, ShutdownGrace: grace}})
	other := start(t, fn, setup{redis: h.redis}) // the instance the retries reach
	ctx := ctxT(t, 30*time.Second)
	in := req(t, map[string]any{"amount": 1})

	quick, slow := make(chan answer, 1), make(chan answer, 1)
	go func() { quick <- h.call(ctx, "quick", in) }()
	go func() { slow <- h.call(ctx, "slow", in) }()
	for range 2 {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the calls did not start")
		}
	}
	stopped := time.Now()
	stop()

	// 1. A new call: refused before anything is claimed.
	a := h.call(ctx, "new", in)
	require.Equal(t, codes.Unavailable, status.Code(a.err), "%v", a.err)
	require.Equal(t, grpcmw.ReasonShuttingDown, reason(a.err))
	_, ok := retryInfo(a.err)
	require.True(t, ok, "with RetryInfo")
	require.EqualValues(t, 2, runs.get(), "the new call did not run")
	scope, err := grpcmw.DefaultScope(metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer alice")))
	require.NoError(t, err)
	n, err := h.rdb.Exists(ctx, h.store.RecordName(scope, "new")).Result()
	require.NoError(t, err)
	require.Zero(t, n, "nothing claimed")

	// 2. A running call that finishes within the grace: its outcome is
	// stored, and the retry elsewhere gets the replay.
	close(finish)
	q := <-quick
	require.NoError(t, q.err, "the quick call was cut off within the grace")
	require.Equal(t, "ch_quick", q.resp.GetFields()["charge"].GetStringValue())
	r := other.call(ctx, "quick", in)
	require.NoError(t, r.err)
	require.True(t, r.replayed())
	require.Equal(t, "ch_quick", r.resp.GetFields()["charge"].GetStringValue())

	// 3. A call still running after the grace: cut off, record kept, taken
	// over by its retry as attempt 2 from the checkpoint.
	var c cut
	select {
	case c = <-cuts:
	case <-ctx.Done():
		t.Fatal("the slow call was never cut off")
	}
	require.ErrorIs(t, c.cause, grpcmw.ErrShutdown)
	require.GreaterOrEqual(t, c.after.Sub(stopped), grace, "cut off before the grace ran out")
	require.Error(t, (<-slow).err)
	s := other.call(ctx, "slow", in)
	require.NoError(t, s.err)
	require.Equal(t, "ch_slow", s.resp.GetFields()["charge"].GetStringValue())
	require.Equal(t, "charged", s.resp.GetFields()["resumed_from"].GetStringValue())
	require.Equal(t, 1, <-attempts)
	require.Equal(t, 2, <-attempts, "a takeover, not a fresh attempt")
	require.EqualValues(t, 2, runs.get(), "each key's side effect once")
	require.False(t, errors.Is(ctx.Err(), context.DeadlineExceeded))
}

// A call cut off (MaxDuration, a graceful stop's grace) after its side
// effect, whose handler then panics, keeps its record: the retry takes it
// over as attempt 2 and reconciles instead of charging again, as Store.Do
// and the HTTP middleware do. The interceptor used to release the key on
// any panic, so the retry ran as a fresh attempt 1 (attempts [1 1]).
func TestCutOffCallThatPanicsIsTakenOver(t *testing.T) {
	for _, cut := range []string{"MaxDuration", "shutdown"} {
		t.Run(cut, func(t *testing.T) {
			var (
				mu       sync.Mutex
				attempts []int
				charges  counter
				cutOnce  atomic.Bool // the first call is cut off
			)
			stopping, stop := context.WithCancel(context.Background())
			defer stop()
			started := make(chan struct{}, 1)
			fn := func(ctx context.Context, _ *structpb.Struct) (*structpb.Struct, error) {
				a := grpcmw.Attempt(ctx)
				mu.Lock()
				attempts = append(attempts, a)
				mu.Unlock()
				if a == 1 { // else an earlier attempt may have charged: reconcile
					charges.inc()
				}
				if !cutOnce.CompareAndSwap(false, true) {
					return structpb.NewStruct(map[string]any{"charges": float64(charges.get())})
				}
				started <- struct{}{}
				<-ctx.Done()
				var result *structpb.Struct // what a call on the cancelled context returned
				return structpb.NewStruct(map[string]any{"fields": len(result.Fields)})
			}
			s := setup{outer: []grpc.UnaryServerInterceptor{recoverer}}
			if cut == "MaxDuration" {
				s.store.MaxDuration = 50 * time.Millisecond // the handler waits for it: its length decides nothing
			} else {
				s.server.Shutdown, s.server.ShutdownGrace = stopping, -1
			}
			h := start(t, fn, s)
			ctx := ctxT(t, 30*time.Second)
			in := req(t, map[string]any{"amount": 1})
			first := make(chan answer, 1)
			go func() { first <- h.call(ctx, "k", in) }()
			<-started
			stop()
			require.Equal(t, codes.Internal, status.Code((<-first).err), "the panic, recovered outside")

			retry := h
			if cut == "shutdown" {
				retry = start(t, fn, setup{redis: h.redis}) // the stopping instance takes no new calls
			}
			a := retry.call(ctx, "k", in)
			require.NoError(t, a.err)
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, []int{1, 2}, attempts, "the retry ran as a fresh attempt")
			require.EqualValues(t, 1, charges.get())
		})
	}
}
