package grpcmw_test

import (
	"context"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkey/idemkey/grpcmw"
)

// attempts records the idempotency-key values of every attempt that reached
// the server.
type attempts struct {
	mu   sync.Mutex
	keys [][]string
}

func (a *attempts) add(ctx context.Context) int {
	md, _ := metadata.FromIncomingContext(ctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.keys = append(a.keys, md.Get(grpcmw.MetadataKey))
	return len(a.keys)
}

func (a *attempts) get() [][]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([][]string(nil), a.keys...)
}

// loseFirstAnswer is a server interceptor outside the idempotency one that
// plays a connection lost in the middle of the first attempt: it answers
// Unavailable at once while the call runs on (and stores its outcome), as a
// proxy would after a reset. Every later attempt goes through untouched.
func loseFirstAnswer(log *attempts, inFlight *sync.WaitGroup) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if log.add(ctx) == 1 {
			inFlight.Go(func() { _, _ = h(context.WithoutCancel(ctx), req) }) // the server has the call; only its answer is lost
			return nil, status.Error(codes.Unavailable, "connection reset (the test's fault)")
		}
		return h(ctx, req)
	}
}

var uuidv7 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// retried runs one logical call, without a key of its own, through a
// client whose retries come from s, against a server that loses the first
// answer and holds the run until a retry has been told Aborted (in
// progress). It checks that the call ends with one execution and the
// replay, every attempt carrying the one key the client interceptor
// minted, and returns the keys seen.
func retried(t *testing.T, s setup) [][]string {
	t.Helper()
	var runs counter
	var log attempts
	var inFlight sync.WaitGroup
	toldInProgress := make(chan struct{})
	var once sync.Once
	s.server.RetryAfter = 50 * time.Millisecond
	s.outer = []grpc.UnaryServerInterceptor{func(ctx context.Context, req any, si *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if status.Code(err) == codes.Aborted {
			once.Do(func() { close(toldInProgress) })
		}
		return resp, err
	}, loseFirstAnswer(&log, &inFlight)}
	h := start(t, func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
		select {
		case <-toldInProgress:
		case <-time.After(5 * time.Second):
		}
		return charge(&runs)(ctx, in)
	}, s)
	t.Cleanup(inFlight.Wait)
	ctx := ctxT(t, 20*time.Second)
	a := h.call(ctx, "", req(t, map[string]any{"amount": 1200}))
	require.NoError(t, a.err)
	require.True(t, a.replayed(), "the final answer is the replay")
	require.Equal(t, "ch_1", a.resp.GetFields()["charge"].GetStringValue())
	require.EqualValues(t, 1, runs.get(), "executions")
	keys := log.get()
	require.GreaterOrEqual(t, len(keys), 3, "lost, in progress, replayed")
	for _, k := range keys {
		require.Equal(t, keys[0], k, "one key on every attempt")
	}
	require.Len(t, keys[0], 1)
	require.Regexp(t, uuidv7, keys[0][0])
	return keys
}

// grpc-go's own retry policy (service config) resends the key the client
// interceptor minted, follows the Aborted answer's pushback, and ends with
// one execution and the replay.
func TestGRPCRetryPolicy(t *testing.T) {
	const config = `{"methodConfig": [{"name": [{"service": "idemkey.test.Payments"}], "retryPolicy": {
		"maxAttempts": 5, "initialBackoff": "0.01s", "maxBackoff": "0.1s", "backoffMultiplier": 2,
		"retryableStatusCodes": ["UNAVAILABLE", "ABORTED"]}}]}`
	retried(t, setup{client: &grpcmw.ClientOptions{}, dial: []grpc.DialOption{grpc.WithDefaultServiceConfig(config)}})
}

// go-grpc-middleware's retry interceptor, after the client interceptor in
// the chain, retries with the same key and ends with one execution and the
// replay.
func TestRetryInterceptor(t *testing.T) {
	retried(t, setup{client: &grpcmw.ClientOptions{}, after: []grpc.UnaryClientInterceptor{retry.UnaryClientInterceptor(
		retry.WithMax(8), retry.WithCodes(codes.Unavailable, codes.Aborted), retry.WithBackoff(retry.BackoffLinear(50*time.Millisecond)))}})
}

// The client interceptor's own retries honour RetryInfo and give up an
// attempt at AttemptTimeout: one execution, and the replay.
func TestClientRetries(t *testing.T) {
	keys := retried(t, setup{client: &grpcmw.ClientOptions{MaxAttempts: 8}})
	require.LessOrEqual(t, len(keys), 8)

	var runs counter
	h := start(t, func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
		time.Sleep(150 * time.Millisecond)
		return charge(&runs)(ctx, in)
	}, setup{server: grpcmw.Options{RetryAfter: 30 * time.Millisecond},
		client: &grpcmw.ClientOptions{MaxAttempts: 30, AttemptTimeout: 50 * time.Millisecond, Budget: grpcmw.BudgetOptions{Burst: 100}}})
	a := h.call(ctxT(t, 20*time.Second), "", req(t, map[string]any{"amount": 1}))
	require.NoError(t, a.err)
	require.True(t, a.replayed())
	require.EqualValues(t, 1, runs.get())
}

// Placed before a retry interceptor, the client interceptor would run once
// per attempt and mint a key for each: the order the documentation gives
// matters, and this is why.
func TestRetryInterceptorOrder(t *testing.T) {
	var runs counter
	var log attempts
	var inFlight sync.WaitGroup
	h := start(t, charge(&runs), setup{outer: []grpc.UnaryServerInterceptor{loseFirstAnswer(&log, &inFlight)},
		after: []grpc.UnaryClientInterceptor{
			retry.UnaryClientInterceptor(retry.WithMax(3), retry.WithCodes(codes.Unavailable), retry.WithBackoff(retry.BackoffLinear(10*time.Millisecond))),
			grpcmw.UnaryClientInterceptor(grpcmw.ClientOptions{}),
		}})
	t.Cleanup(inFlight.Wait)
	a := h.call(ctxT(t, 10*time.Second), "", req(t, map[string]any{"amount": 1}))
	require.NoError(t, a.err)
	inFlight.Wait()
	keys := log.get()
	require.Len(t, keys, 2)
	require.NotEqual(t, keys[0], keys[1], "a key per attempt")
	require.EqualValues(t, 2, runs.get(), "so the call ran twice")
}

// A key the caller set is never changed; a malformed one, or two, fail the
// call before anything is sent.
func TestClientCallerKey(t *testing.T) {
	var runs counter
	var log attempts
	h := start(t, charge(&runs), setup{client: &grpcmw.ClientOptions{}, outer: []grpc.UnaryServerInterceptor{
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			log.add(ctx)
			return h(ctx, req)
		}}})
	ctx := ctxT(t, 10*time.Second)
	in := req(t, map[string]any{"amount": 1})
	require.NoError(t, h.call(grpcmw.WithKey(ctx, "mine"), "", in).err)
	require.NoError(t, h.call(ctx, `"quoted key"`, in).err)
	require.Equal(t, [][]string{{"mine"}, {`"quoted key"`}}, log.get())

	for _, bad := range [][]string{{"has space"}, {"a", "b"}} {
		cctx := ctx
		for _, k := range bad {
			cctx = metadata.AppendToOutgoingContext(cctx, grpcmw.MetadataKey, k)
		}
		a := h.call(cctx, "", in)
		require.Equal(t, codes.InvalidArgument, status.Code(a.err), "%v", a.err)
	}
	require.Len(t, log.get(), 2, "nothing sent")

	// Match leaves other methods alone.
	h2 := start(t, charge(&runs), setup{redis: h.redis, client: &grpcmw.ClientOptions{Match: grpcmw.Methods("/other/Method")}})
	a := h2.call(ctx, "", in)
	require.Equal(t, codes.InvalidArgument, status.Code(a.err))
	require.Equal(t, grpcmw.ReasonKeyMissing, reason(a.err))
}
