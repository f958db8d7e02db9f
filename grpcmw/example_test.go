package grpcmw_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkey/idemkey/grpcmw"
	"github.com/idemkey/idemkey/redisstore"
)

type exampleAccount struct{}

func ExampleUnaryServerInterceptor() {
	mr, err := miniredis.Run() // an embedded Redis, for the example
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	store, err := redisstore.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), redisstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		// Your authentication first: it puts the caller in the context.
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(context.WithValue(ctx, exampleAccount{}, "acct_42"), req)
		},
		grpcmw.UnaryServerInterceptor(store, grpcmw.Options{
			Scope: func(ctx context.Context) (string, error) {
				acct, _ := ctx.Value(exampleAccount{}).(string)
				return acct, nil
			},
		}),
	))
	runs := 0
	srv.RegisterService(&paymentsDesc, handler(func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
		runs++
		// ctx ends on a lost lease, never when the caller gives up; the
		// derived key is the provider's idempotency key.
		_ = grpcmw.DerivedKey(ctx, "charge")
		return structpb.NewStruct(map[string]any{"charge": "ch_1"})
	}))
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), grpcmw.MetadataKey, "0190b5e4-7c1d-7a2b-8c3d-4e5f6a7b8c9d")
	for range 2 {
		out, header := new(structpb.Struct), metadata.MD{}
		in, _ := structpb.NewStruct(map[string]any{"amount": 1200})
		if err := conn.Invoke(ctx, "/idemkey.test.Payments/Charge", in, out, grpc.Header(&header)); err != nil {
			log.Fatal(err)
		}
		fmt.Println(out.GetFields()["charge"].GetStringValue(), "replayed:", grpcmw.Replayed(header))
	}
	fmt.Println("runs:", runs)
	// Output:
	// ch_1 replayed: false
	// ch_1 replayed: true
	// runs: 1
}

func ExampleUnaryClientInterceptor() {
	// One key per logical call, kept on every retry: grpc-go's retry
	// policy resends it; a retry interceptor goes after this one.
	conn, err := grpc.NewClient("127.0.0.1:50051",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"methodConfig": [{"name": [{"service": "payments.v1.Payments"}],
			"retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "2s", "backoffMultiplier": 2,
			"retryableStatusCodes": ["UNAVAILABLE", "ABORTED"]}}]}`),
		grpc.WithChainUnaryInterceptor(grpcmw.UnaryClientInterceptor(grpcmw.ClientOptions{})))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	// To keep a key beyond one call (a job that may restart), pin it:
	ctx := grpcmw.WithKey(context.Background(), "order-4711")
	_ = ctx // conn.Invoke(ctx, ...) or a generated client's methods
	fmt.Println("ok")
	// Output: ok
}
