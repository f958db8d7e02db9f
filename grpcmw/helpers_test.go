package grpcmw_test

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkey/idemkey/grpcmw"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

// The test service: one unary method over well-known types, registered by a
// hand-written ServiceDesc (no protoc), whose handler each test supplies.
const chargeMethod = "/idemkey.test.Payments/Charge"

type handler func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error)

var paymentsDesc = grpc.ServiceDesc{
	ServiceName: "idemkey.test.Payments",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Charge", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(structpb.Struct)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := srv.(handler)
		if ic == nil {
			return h(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: chargeMethod}, func(ctx context.Context, req any) (any, error) {
			return h(ctx, req.(*structpb.Struct))
		})
	}}},
}

// setup configures a harness; the zero value is a protected server with
// default options on a fresh redis-server and a plain client.
type setup struct {
	redis  *redistest.Server // default: a fresh one
	hook   redis.Hook        // added to the store's client; nil for none
	store  redisstore.Options
	server grpcmw.Options
	outer  []grpc.UnaryServerInterceptor // run before (outside) the idempotency interceptor
	dial   []grpc.DialOption
	client *grpcmw.ClientOptions         // the client interceptor, first in the chain; nil for none
	after  []grpc.UnaryClientInterceptor // client interceptors after it
}

type harness struct {
	redis *redistest.Server
	rdb   *redis.Client
	store *redisstore.Store
	conn  *grpc.ClientConn
	srv   *grpc.Server
}

// start serves h on 127.0.0.1 behind the idemkey interceptor and dials it.
func start(t *testing.T, h handler, s setup) *harness {
	t.Helper()
	if s.redis == nil {
		s.redis = redistest.Start(t)
	}
	rdb := s.redis.Client(t)
	if s.hook != nil {
		rdb.AddHook(s.hook)
	}
	if s.store.Lease == 0 {
		s.store.Lease = 2 * time.Second
	}
	if s.server.Logger == nil {
		s.server.Logger = slog.New(slog.DiscardHandler)
	}
	store, err := redisstore.New(rdb, s.store)
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(append(s.outer, grpcmw.UnaryServerInterceptor(store, s.server))...))
	srv.RegisterService(&paymentsDesc, h)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	var chain []grpc.UnaryClientInterceptor
	if s.client != nil {
		chain = append(chain, grpcmw.UnaryClientInterceptor(*s.client))
	}
	chain = append(chain, s.after...)
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithChainUnaryInterceptor(chain...)}, s.dial...)
	conn, err := grpc.NewClient(lis.Addr().String(), dial...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &harness{redis: s.redis, rdb: rdb, store: store, conn: conn, srv: srv}
}

// answer is what a call got.
type answer struct {
	resp    *structpb.Struct
	header  metadata.MD
	trailer metadata.MD
	err     error
}

func (a answer) replayed() bool { return grpcmw.Replayed(a.header) }

// call calls Charge as the caller alice with key (none if ""), in.
func (h *harness) call(ctx context.Context, key string, in *structpb.Struct, opts ...grpc.CallOption) answer {
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer alice")
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, grpcmw.MetadataKey, key)
	}
	var a answer
	a.resp = new(structpb.Struct)
	opts = append(opts, grpc.Header(&a.header), grpc.Trailer(&a.trailer))
	a.err = h.conn.Invoke(ctx, chargeMethod, in, a.resp, opts...)
	return a
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func req(t *testing.T, fields map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(fields)
	require.NoError(t, err)
	return s
}

// reason returns the ErrorInfo reason of the interceptor's answer err, or "".
func reason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == grpcmw.ErrorDomain {
			return ei.GetReason()
		}
	}
	return ""
}

// retryInfo returns the RetryInfo delay of err, and whether it has one.
func retryInfo(err error) (time.Duration, bool) {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// counter counts executions.
type counter struct{ n atomic.Int64 }

func (c *counter) inc() int64 { return c.n.Add(1) }
func (c *counter) get() int64 { return c.n.Load() }

// eventually polls cond every 5ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v: %s", d, msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }
