package grpcmw_test

import (
	"context"
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

// hedgingConfig is a service config with the hedging policy the package
// documents: ABORTED (a copy that meets the running call) among the
// non-fatal codes.
const hedgingConfig = `{"methodConfig": [{"name": [{"service": "idemkey.test.Payments"}], "hedgingPolicy": {
	"maxAttempts": 3, "hedgingDelay": "0.05s", "nonFatalStatusCodes": ["ABORTED", "UNAVAILABLE"]}}]}`

// grpc-go (v1.85) accepts a hedgingPolicy and sends no hedged copy: a call
// that outlasts the hedging delay many times over reaches the server
// once, and succeeds. (Hedging clients in other languages do send copies:
// TestHedgedCopyMeetsTheRunningCall.)
func TestGrpcGoSendsNoHedgedCopy(t *testing.T) {
	var calls, runs counter
	release := make(chan struct{})
	h := start(t, func(ctx context.Context, _ *structpb.Struct) (*structpb.Struct, error) {
		runs.inc()
		<-release
		return structpb.NewStruct(map[string]any{"charge": "ch_1"})
	}, setup{
		outer: []grpc.UnaryServerInterceptor{func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
			calls.inc()
			return next(ctx, req)
		}},
		dial: []grpc.DialOption{grpc.WithDefaultServiceConfig(hedgingConfig)},
	})
	ctx := ctxT(t, 30*time.Second)
	done := make(chan answer, 1)
	go func() { done <- h.call(ctx, "k", req(t, map[string]any{"amount": 1})) }()
	eventually(t, 10*time.Second, func() bool { return runs.get() == 1 }, "the call ran")
	// Ten hedging delays: a hedging client would have sent its copies.
	hedged := time.After(10 * 50 * time.Millisecond)
	<-hedged
	close(release)
	a := <-done
	require.NoError(t, a.err)
	require.EqualValues(t, 1, calls.get(), "grpc-go sent a hedged copy")
	require.EqualValues(t, 1, runs.get())
}

// A hedged copy (the same call, key and request, sent while the first
// runs, as a hedging client sends it) is answered Aborted IN_PROGRESS: a
// hedging client takes that as the call's answer unless ABORTED is among
// its hedgingPolicy's nonFatalStatusCodes (hedgingConfig), and the caller
// would see an error for a call that succeeds. With Options.Wait the copy
// waits for the outcome instead and gets the replay: both answers are the
// call's success, whichever the client takes. The copy goes to another
// server, as hedged copies do; the handler runs once either way.
func TestHedgedCopyMeetsTheRunningCall(t *testing.T) {
	for _, wait := range []time.Duration{0, 10 * time.Second} {
		t.Run(map[bool]string{true: "no Wait", false: "Wait"}[wait == 0], func(t *testing.T) {
			var runs counter
			started, release := make(chan struct{}), make(chan struct{})
			fn := func(ctx context.Context, _ *structpb.Struct) (*structpb.Struct, error) {
				runs.inc()
				close(started)
				<-release
				return structpb.NewStruct(map[string]any{"charge": "ch_1"})
			}
			h := start(t, fn, setup{server: grpcmw.Options{Wait: wait}})
			other := start(t, fn, setup{redis: h.redis, server: grpcmw.Options{Wait: wait}})
			ctx := ctxT(t, 30*time.Second)
			in := req(t, map[string]any{"amount": 1})
			first, copy := make(chan answer, 1), make(chan answer, 1)
			go func() { first <- h.call(ctx, "k", in) }()
			<-started
			go func() { copy <- other.call(ctx, "k", in) }() // the hedged copy
			if wait == 0 {
				c := <-copy
				require.Equal(t, codes.Aborted, status.Code(c.err), "%v", c.err)
				require.Equal(t, grpcmw.ReasonInProgress, reason(c.err))
				close(release)
			} else {
				// The copy waits: it has marked the record (watch.lua).
				scope, err := grpcmw.DefaultScope(metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer alice")))
				require.NoError(t, err)
				eventually(t, 10*time.Second, func() bool {
					v, err := h.rdb.Get(ctx, h.store.RecordName(scope, "k")).Result()
					return err == nil && len(v) > 1 && v[1] == 'w'
				}, "the copy did not wait for the outcome")
				close(release)
				c := <-copy
				require.NoError(t, c.err)
				require.Equal(t, "ch_1", c.resp.GetFields()["charge"].GetStringValue())
			}
			a := <-first
			require.NoError(t, a.err)
			require.Equal(t, "ch_1", a.resp.GetFields()["charge"].GetStringValue())
			require.EqualValues(t, 1, runs.get())
		})
	}
}
