package grpcmw_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkey/idemkey/grpcmw"
	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/redisstore"
)

// charge is a handler that counts its runs and answers with the run number.
func charge(runs *counter) handler {
	return func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
		n := runs.inc()
		return structpb.NewStruct(map[string]any{"charge": fmt.Sprintf("ch_%d", n), "amount": in.GetFields()["amount"].GetNumberValue()})
	}
}

// 50 parallel calls with one key run the handler once; each of the others
// gets the replay or Aborted with RetryInfo, and a call after them the
// replay.
func TestConcurrentCallsOneKey(t *testing.T) {
	var runs counter
	release := make(chan struct{})
	h := start(t, func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
		select {
		case <-release:
		case <-time.After(10 * time.Second): // the test fails on its own; do not hang
		}
		return charge(&runs)(ctx, in)
	}, setup{server: grpcmw.Options{RetryAfter: 250 * time.Millisecond}})
	ctx := ctxT(t, 20*time.Second)
	in := req(t, map[string]any{"amount": 1200})

	const n = 50
	answers := make([]answer, n)
	var wg sync.WaitGroup
	var aborted sync.WaitGroup
	aborted.Add(n - 1)
	go func() { aborted.Wait(); close(release) }() // release the handler once the others were refused
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-gate
			answers[i] = h.call(ctx, "key-concurrent", in)
			if status.Code(answers[i].err) == codes.Aborted {
				aborted.Done()
			}
		})
	}
	close(gate)
	wg.Wait()
	require.EqualValues(t, 1, runs.get(), "executions")
	var originals, inProgress int
	for _, a := range answers {
		switch {
		case a.err == nil:
			require.False(t, a.replayed())
			require.Equal(t, "ch_1", a.resp.GetFields()["charge"].GetStringValue())
			originals++
		default:
			require.Equal(t, codes.Aborted, status.Code(a.err), "%v", a.err)
			require.Equal(t, grpcmw.ReasonInProgress, reason(a.err))
			d, ok := retryInfo(a.err)
			require.True(t, ok, "RetryInfo")
			require.Equal(t, 250*time.Millisecond, d)
			require.Equal(t, []string{"250"}, a.trailer.Get("grpc-retry-pushback-ms"))
			inProgress++
		}
	}
	require.Equal(t, 1, originals)
	require.Equal(t, n-1, inProgress)

	a := h.call(ctx, "key-concurrent", in)
	require.NoError(t, a.err)
	require.True(t, a.replayed())
	require.Equal(t, "ch_1", a.resp.GetFields()["charge"].GetStringValue())
	require.EqualValues(t, 1, runs.get(), "executions")
}

// A replay is the stored response, with the header and trailer metadata the
// handler set, and idempotency-replayed: true.
func TestReplay(t *testing.T) {
	var runs counter
	h := start(t, func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
		assert.NoError(t, grpc.SetHeader(ctx, metadata.Pairs("location", "/v1/charges/1")))
		assert.NoError(t, grpc.SetTrailer(ctx, metadata.Pairs("x-ledger", "l1", "x-ledger", "l2")))
		if grpcmw.Key(ctx) == "plain" {
			return charge(&runs)(ctx, in)
		}
		assert.Equal(t, "key-replay", grpcmw.Key(ctx))
		assert.Equal(t, 1, grpcmw.Attempt(ctx))
		assert.Len(t, grpcmw.DerivedKey(ctx, "charge"), 32)
		return charge(&runs)(ctx, in)
	}, setup{})
	ctx := ctxT(t, 10*time.Second)
	in := req(t, map[string]any{"amount": 1200})

	first := h.call(ctx, "key-replay", in)
	require.NoError(t, first.err)
	require.False(t, first.replayed())
	require.Equal(t, []string{"/v1/charges/1"}, first.header.Get("location"))
	for range 2 {
		again := h.call(ctx, "key-replay", in)
		require.NoError(t, again.err)
		require.True(t, again.replayed())
		require.True(t, proto.Equal(first.resp, again.resp), "%v != %v", first.resp, again.resp)
		require.Equal(t, []string{"true"}, again.header.Get(grpcmw.MetadataReplayed))
		require.Equal(t, []string{"/v1/charges/1"}, again.header.Get("location"))
		require.Equal(t, []string{"l1", "l2"}, again.trailer.Get("x-ledger"))
	}
	require.EqualValues(t, 1, runs.get())

	// The key "k" and the RFC 8941 string "\"k\"" are one key.
	require.NoError(t, h.call(ctx, "plain", in).err)
	quoted := h.call(ctx, `"plain"`, in)
	require.NoError(t, quoted.err)
	require.True(t, quoted.replayed())
	require.EqualValues(t, 2, runs.get())
}

// The same key with another request is FailedPrecondition; the outcome
// stays, and the handler does not run.
func TestMismatch(t *testing.T) {
	var runs counter
	h := start(t, charge(&runs), setup{})
	ctx := ctxT(t, 10*time.Second)
	require.NoError(t, h.call(ctx, "key-mismatch", req(t, map[string]any{"amount": 1200})).err)
	a := h.call(ctx, "key-mismatch", req(t, map[string]any{"amount": 9900}))
	require.Equal(t, codes.FailedPrecondition, status.Code(a.err), "%v", a.err)
	require.Equal(t, grpcmw.ReasonKeyReused, reason(a.err))
	require.False(t, a.replayed())
	// Field order does not change the request (deterministic encoding).
	b := h.call(ctx, "key-mismatch", req(t, map[string]any{"amount": 1200}))
	require.NoError(t, b.err)
	require.True(t, b.replayed())
	require.EqualValues(t, 1, runs.get())
}

// Keys: missing, malformed, more than one; Optional and Match let calls
// through unprotected.
func TestKeys(t *testing.T) {
	var runs counter
	rs := start(t, charge(&runs), setup{}).redis
	h := start(t, charge(&runs), setup{redis: rs})
	ctx := ctxT(t, 10*time.Second)
	in := req(t, map[string]any{"amount": 1})
	for _, tc := range []struct {
		name   string
		keys   []string
		reason string
	}{
		{"missing", nil, grpcmw.ReasonKeyMissing},
		{"empty", []string{""}, grpcmw.ReasonKeyMalformed},
		{"space", []string{"a b"}, grpcmw.ReasonKeyMalformed},
		{"too long", []string{strings.Repeat("k", 256)}, grpcmw.ReasonKeyMalformed},
		{"two", []string{"a", "b"}, grpcmw.ReasonKeyMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer alice")
			for _, k := range tc.keys {
				cctx = metadata.AppendToOutgoingContext(cctx, grpcmw.MetadataKey, k)
			}
			err := h.conn.Invoke(cctx, chargeMethod, in, new(structpb.Struct))
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			require.Equal(t, tc.reason, reason(err), "%v", err)
		})
	}
	require.Zero(t, runs.get())

	opt := start(t, charge(&runs), setup{redis: rs, server: grpcmw.Options{Optional: true}})
	require.NoError(t, opt.call(ctx, "", in).err)
	require.NoError(t, opt.call(ctx, "", in).err)
	require.EqualValues(t, 2, runs.get(), "an optional key absent: unprotected")

	skip := start(t, charge(&runs), setup{redis: rs, server: grpcmw.Options{Match: grpcmw.Methods("/other/Method")}})
	require.NoError(t, skip.call(ctx, "", in).err)
	require.EqualValues(t, 3, runs.get(), "a method not matched passes through")
	prot := start(t, charge(&runs), setup{redis: rs, server: grpcmw.Options{Match: grpcmw.Methods(chargeMethod)}})
	require.Equal(t, codes.InvalidArgument, status.Code(prot.call(ctx, "", in).err))
}

// The default scope keeps callers apart by their credential and refuses a
// call that presents none; Scope's errors are Unauthenticated, or the
// status they are.
func TestScope(t *testing.T) {
	var runs counter
	h := start(t, charge(&runs), setup{})
	ctx := ctxT(t, 10*time.Second)
	in := req(t, map[string]any{"amount": 1})
	for _, who := range []string{"Bearer alice", "Bearer bob"} {
		cctx := metadata.AppendToOutgoingContext(ctx, "authorization", who, grpcmw.MetadataKey, "shared-key")
		require.NoError(t, h.conn.Invoke(cctx, chargeMethod, in, new(structpb.Struct)))
	}
	require.EqualValues(t, 2, runs.get(), "two callers, one key each")
	cctx := metadata.AppendToOutgoingContext(ctx, grpcmw.MetadataKey, "no-credential")
	err := h.conn.Invoke(cctx, chargeMethod, in, new(structpb.Struct))
	require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	require.Equal(t, grpcmw.ReasonScopeRequired, reason(err))

	for _, tc := range []struct {
		scope  func(context.Context) (string, error)
		code   codes.Code
		reason string
	}{
		{func(context.Context) (string, error) { return "", errors.New("no session") }, codes.Unauthenticated, grpcmw.ReasonCallerUnknown},
		{func(context.Context) (string, error) { return "", status.Error(codes.PermissionDenied, "banned") }, codes.PermissionDenied, ""},
		{func(context.Context) (string, error) { return "", nil }, codes.Internal, grpcmw.ReasonScopeInvalid},
	} {
		s := start(t, charge(&runs), setup{redis: h.redis, server: grpcmw.Options{Scope: tc.scope}})
		err := s.call(ctx, "k", in).err
		require.Equal(t, tc.code, status.Code(err), "%v", err)
		require.Equal(t, tc.reason, reason(err))
	}
	require.EqualValues(t, 2, runs.get())
}

// A deterministic status error is stored and replayed with its code,
// message and details; a transient one, a plain error and a panic release
// the key, so the retry runs again.
func TestOutcomes(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	in := req(t, map[string]any{"amount": 1})
	declined := func() error {
		st, err := status.New(codes.FailedPrecondition, "card declined").WithDetails(&errdetails.ErrorInfo{Reason: "CARD_DECLINED", Domain: "payments.example"})
		require.NoError(t, err)
		return st.Err()
	}

	t.Run("deterministic", func(t *testing.T) {
		var runs counter
		h := start(t, func(ctx context.Context, _ *structpb.Struct) (*structpb.Struct, error) {
			runs.inc()
			_ = grpc.SetHeader(ctx, metadata.Pairs("x-decline", "insufficient_funds"))
			return nil, declined()
		}, setup{})
		first := h.call(ctx, "k", in)
		for range 2 {
			a := h.call(ctx, "k", in)
			require.True(t, a.replayed())
			require.Equal(t, []string{"insufficient_funds"}, a.header.Get("x-decline"))
			require.True(t, proto.Equal(status.Convert(first.err).Proto(), status.Convert(a.err).Proto()), "%v != %v", first.err, a.err)
			require.Equal(t, "CARD_DECLINED", status.Convert(a.err).Details()[0].(*errdetails.ErrorInfo).GetReason())
		}
		require.EqualValues(t, 1, runs.get())
	})

	for _, tc := range []struct {
		name string
		fail func() error
	}{
		{"unavailable", func() error { return status.Error(codes.Unavailable, "provider down") }},
		{"internal", func() error { return status.Error(codes.Internal, "bug") }},
		{"plain error", func() error { return errors.New("plain") }},
		{"panic", func() error { panic("boom") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs counter
			h := start(t, func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
				if runs.inc() == 1 {
					return nil, tc.fail()
				}
				return structpb.NewStruct(map[string]any{"ok": true})
			}, setup{outer: []grpc.UnaryServerInterceptor{recoverer}})
			first := h.call(ctx, "k", in)
			require.Error(t, first.err)
			second := h.call(ctx, "k", in)
			require.NoError(t, second.err)
			require.False(t, second.replayed())
			require.EqualValues(t, 2, runs.get(), "released: the retry ran again")
			third := h.call(ctx, "k", in)
			require.True(t, third.replayed())
		})
	}

	t.Run("final is configurable", func(t *testing.T) {
		var runs counter
		h := start(t, func(ctx context.Context, _ *structpb.Struct) (*structpb.Struct, error) {
			runs.inc()
			return nil, declined()
		}, setup{server: grpcmw.Options{Final: func(c codes.Code) bool { return c == codes.OK }}})
		h.call(ctx, "k", in)
		h.call(ctx, "k", in)
		require.EqualValues(t, 2, runs.get())
	})
}

// recoverer turns a panic into Internal, as a recovery interceptor does.
func recoverer(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Errorf(codes.Internal, "panic: %v", p)
		}
	}()
	return h(ctx, req)
}

// A caller that gives up (its deadline passes) does not cancel the run: the
// handler finishes on its detached context, stores its outcome, and the
// retry gets the replay.
func TestCallerGivesUp(t *testing.T) {
	var runs counter
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	h := start(t, func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
		close(started)
		select {
		case <-ctx.Done():
		case <-finish:
		}
		done <- ctx.Err()
		_, hasDeadline := ctx.Deadline()
		assert.False(t, hasDeadline, "the caller's deadline does not reach the run")
		return charge(&runs)(ctx, in)
	}, setup{})
	ctx := ctxT(t, 20*time.Second)
	in := req(t, map[string]any{"amount": 1})
	short, cancel := context.WithTimeout(ctx, time.Second)
	a := h.call(short, "k", in)
	cancel()
	require.Equal(t, codes.DeadlineExceeded, status.Code(a.err), "%v", a.err)
	select {
	case <-started:
	default:
		t.Fatal("the handler did not start within the caller's 1s deadline")
	}
	close(finish) // only now, after the caller gave up
	require.NoError(t, <-done, "the handler's context was not cancelled")
	eventually(t, 5*time.Second, func() bool {
		b := h.call(ctx, "k", in)
		return b.err == nil && b.replayed()
	}, "the retry gets the replay")
	require.EqualValues(t, 1, runs.get())
}

// With Wait, a duplicate of a running call waits and answers with the
// replay.
func TestWait(t *testing.T) {
	var runs counter
	started := make(chan struct{})
	h := start(t, func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
		close(started)
		time.Sleep(100 * time.Millisecond)
		return charge(&runs)(ctx, in)
	}, setup{server: grpcmw.Options{Wait: 5 * time.Second}})
	ctx := ctxT(t, 10*time.Second)
	in := req(t, map[string]any{"amount": 1})
	first := make(chan answer, 1)
	go func() { first <- h.call(ctx, "k", in) }()
	<-started
	dup := h.call(ctx, "k", in)
	require.NoError(t, dup.err)
	require.True(t, dup.replayed())
	orig := <-first
	require.NoError(t, orig.err)
	require.True(t, proto.Equal(orig.resp, dup.resp))
	require.EqualValues(t, 1, runs.get())
}

// Redis unreachable: Unavailable with RetryInfo, nothing run; FailOpen runs
// the handler unprotected.
func TestStoreUnreachable(t *testing.T) {
	var runs counter
	h := start(t, charge(&runs), setup{server: grpcmw.Options{Timeout: 500 * time.Millisecond}})
	open := start(t, charge(&runs), setup{redis: h.redis, server: grpcmw.Options{Timeout: 500 * time.Millisecond, FailOpen: true}})
	h.redis.Kill()
	ctx := ctxT(t, 10*time.Second)
	in := req(t, map[string]any{"amount": 1})
	a := h.call(ctx, "k", in)
	require.Equal(t, codes.Unavailable, status.Code(a.err), "%v", a.err)
	require.Equal(t, grpcmw.ReasonStoreUnavailable, reason(a.err))
	_, ok := retryInfo(a.err)
	require.True(t, ok)
	require.Zero(t, runs.get())
	require.NoError(t, open.call(ctx, "k", in).err)
	require.EqualValues(t, 1, runs.get())
}

// Shutdown with a negative ShutdownGrace stops a running handler at once
// and keeps its record: the retry takes it over as attempt 2, with the
// checkpoint.
func TestShutdownInterrupts(t *testing.T) {
	var runs counter
	stopping, stop := context.WithCancel(context.Background())
	defer stop()
	checkpointed := make(chan struct{})
	type seen struct {
		attempt int
		point   string
		data    string
	}
	attempts := make(chan seen, 2)
	fn := func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
		p, d := grpcmw.RecoveryPoint(ctx)
		attempts <- seen{grpcmw.Attempt(ctx), p, string(d)}
		if grpcmw.Attempt(ctx) == 1 {
			runs.inc()
			assert.NoError(t, grpcmw.Checkpoint(ctx, "charged", []byte("ch_1")))
			close(checkpointed)
			<-ctx.Done()
			assert.ErrorIs(t, context.Cause(ctx), grpcmw.ErrShutdown)
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return structpb.NewStruct(map[string]any{"charge": p})
	}
	h := start(t, fn, setup{server: grpcmw.Options{Shutdown: stopping, ShutdownGrace: -1}})
	other := start(t, fn, setup{redis: h.redis}) // where the retry goes
	ctx := ctxT(t, 10*time.Second)
	in := req(t, map[string]any{"amount": 1})
	first := make(chan answer, 1)
	go func() { first <- h.call(ctx, "k", in) }()
	<-checkpointed
	stop()
	require.Error(t, (<-first).err)
	a := other.call(ctx, "k", in)
	require.NoError(t, a.err)
	require.Equal(t, "charged", a.resp.GetFields()["charge"].GetStringValue())
	require.Equal(t, seen{1, "", ""}, <-attempts)
	require.Equal(t, seen{2, "charged", "ch_1"}, <-attempts)
	require.EqualValues(t, 1, runs.get())
}

// A stored outcome whose response type cannot be resolved is Internal
// STORED_RESPONSE_UNREADABLE, not a second run.
func TestStoredUnreadable(t *testing.T) {
	var runs counter
	h := start(t, charge(&runs), setup{})
	ctx := ctxT(t, 10*time.Second)
	in := req(t, map[string]any{"amount": 1})
	require.NoError(t, h.call(ctx, "k", in).err)
	other := start(t, charge(&runs), setup{redis: h.redis, server: grpcmw.Options{Types: new(protoregistry.Types)}})
	a := other.call(ctx, "k", in)
	require.Equal(t, codes.Internal, status.Code(a.err), "%v", a.err)
	require.Equal(t, grpcmw.ReasonStoredUnreadable, reason(a.err))
	require.EqualValues(t, 1, runs.get())
}

// The store's observer sees each decision, with the method as its route,
// and a panicking observer breaks nothing.
func TestObserver(t *testing.T) {
	var mu sync.Mutex
	var kinds []observe.Kind
	obs := observe.Func{OnEvent: func(_ context.Context, e *observe.Event) {
		mu.Lock()
		kinds = append(kinds, e.Kind)
		mu.Unlock()
		assert.Equal(t, chargeMethod, e.Route)
		if e.Kind == observe.Replayed {
			panic("observer bug")
		}
	}}
	var runs counter
	h := start(t, charge(&runs), setup{store: redisstore.Options{Observer: obs}})
	ctx := ctxT(t, 10*time.Second)
	in := req(t, map[string]any{"amount": 1})
	require.NoError(t, h.call(ctx, "k", in).err)
	require.NoError(t, h.call(ctx, "k", in).err)
	require.Error(t, h.call(ctx, "", in).err)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []observe.Kind{observe.Claimed, observe.Completed, observe.Replayed, observe.Rejected}, kinds)
}

// Options.Fingerprint replaces the default: here a field that differs
// between retries is left out; a failing one refuses the call before
// anything is claimed.
func TestFingerprintOption(t *testing.T) {
	var runs counter
	h := start(t, charge(&runs), setup{server: grpcmw.Options{Fingerprint: func(ctx context.Context, method string, r any) (string, error) {
		in := proto.Clone(r.(*structpb.Struct)).(*structpb.Struct)
		delete(in.Fields, "sent_at")
		return grpcmw.DefaultFingerprint(ctx, method, in)
	}}})
	ctx := ctxT(t, 10*time.Second)
	require.NoError(t, h.call(ctx, "k", req(t, map[string]any{"amount": 1, "sent_at": "10:00"})).err)
	a := h.call(ctx, "k", req(t, map[string]any{"amount": 1, "sent_at": "10:01"}))
	require.NoError(t, a.err)
	require.True(t, a.replayed())
	require.Equal(t, codes.FailedPrecondition, status.Code(h.call(ctx, "k", req(t, map[string]any{"amount": 2})).err))

	bad := start(t, charge(&runs), setup{redis: h.redis, server: grpcmw.Options{Fingerprint: func(context.Context, string, any) (string, error) {
		return "", errors.New("no")
	}}})
	err := bad.call(ctx, "k2", req(t, map[string]any{"amount": 1})).err
	require.Equal(t, codes.Internal, status.Code(err))
	require.Equal(t, grpcmw.ReasonFingerprintFailed, reason(err))
	require.EqualValues(t, 1, runs.get())

	_, err = grpcmw.DefaultFingerprint(ctx, chargeMethod, "not a message")
	require.Error(t, err)
}

// A retry after the outcome expired, within the tombstone's retention, is
// told so (FailedPrecondition, RESPONSE_EXPIRED, marked replayed) and does
// not run again.
func TestResponseExpired(t *testing.T) {
	var runs counter
	h := start(t, charge(&runs), setup{store: redisstore.Options{Lease: 100 * time.Millisecond, Retention: 300 * time.Millisecond,
		TombstoneRetention: time.Minute}})
	ctx := ctxT(t, 10*time.Second)
	in := req(t, map[string]any{"amount": 1})
	require.NoError(t, h.call(ctx, "k", in).err)
	var a answer
	eventually(t, 5*time.Second, func() bool {
		a = h.call(ctx, "k", in)
		return a.err != nil
	}, "the outcome expires")
	require.Equal(t, codes.FailedPrecondition, status.Code(a.err), "%v", a.err)
	require.Equal(t, grpcmw.ReasonResponseExpired, reason(a.err))
	require.True(t, a.replayed())
	require.EqualValues(t, 1, runs.get())
}
