// Command example is a payments service over gRPC protected by grpcmw, and
// a client that calls it through a network that loses answers: every
// payment is charged once, and every retry gets the stored answer.
//
//	go run ./example                          # on an embedded miniredis
//	go run ./example -redis redis://127.0.0.1:6379/0
//
// The service needs no protoc step: its messages are well-known types
// (google.protobuf.Struct) and its grpc.ServiceDesc is written by hand, as
// generated code would write it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkey/idemkey/grpcmw"
	"github.com/idemkey/idemkey/redisstore"
)

func main() {
	// $REDIS_URL is read after parsing, not as the flag's default: -h and
	// usage errors print defaults, password and all.
	url := flag.String("redis", "", "Redis URL (default: $REDIS_URL, else an embedded miniredis, gone on exit)")
	n := flag.Int("payments", 5, "payments to send")
	flag.Parse()
	if *url == "" {
		*url = os.Getenv("REDIS_URL")
	}
	if err := run(os.Stdout, *url, *n); err != nil {
		log.Fatal(err)
	}
}

// chargeMethod is the full name of the service's one method.
const chargeMethod = "/payments.v1.Payments/Charge"

// Payments is the service: Charge takes {"amount": cents} and answers
// {"amount", "charge"}.
type Payments struct {
	charges atomic.Int64 // the provider's side effects
}

// paymentsDesc is what protoc-gen-go-grpc would generate for
//
//	service Payments { rpc Charge(google.protobuf.Struct) returns (google.protobuf.Struct); }
var paymentsDesc = grpc.ServiceDesc{
	ServiceName: "payments.v1.Payments",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Charge", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(structpb.Struct)
		if err := dec(in); err != nil {
			return nil, err
		}
		if ic == nil {
			return srv.(*Payments).Charge(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: chargeMethod}, func(ctx context.Context, req any) (any, error) {
			return srv.(*Payments).Charge(ctx, req.(*structpb.Struct))
		})
	}}},
}

// Charge charges the provider once per payment: the provider gets the
// derived key (a retry that reached it would not charge again), and the
// charge is checkpointed, so that an attempt taking over after a crash
// resumes instead of charging again. A declined card is a final answer,
// stored and replayed.
func (p *Payments) Charge(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	amount := in.GetFields()["amount"].GetNumberValue()
	if amount > 100000 {
		st, _ := status.New(codes.FailedPrecondition, "card declined: amount over the limit").
			WithDetails(&errdetails.ErrorInfo{Reason: "CARD_DECLINED", Domain: "payments.example"})
		return nil, st.Err()
	}
	charge, data := grpcmw.RecoveryPoint(ctx)
	if charge != "charged" {
		p.charges.Add(1)
		data = []byte("ch_" + grpcmw.DerivedKey(ctx, "charge")[:12]) // the provider's charge ID
		if err := grpcmw.Checkpoint(ctx, "charged", data); err != nil {
			return nil, status.Error(codes.Unavailable, "checkpoint failed; retry")
		}
	}
	return structpb.NewStruct(map[string]any{"amount": amount, "charge": string(data)})
}

type accountKey struct{}

// authenticate is the service's authentication: it maps the bearer token
// to an account, which Scope reads. An unknown caller is refused before
// anything is claimed.
func authenticate(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	accounts := map[string]string{"Bearer tok_alice": "acct_alice"}
	auth := md.Get("authorization")
	if len(auth) != 1 || accounts[auth[0]] == "" {
		return nil, status.Error(codes.Unauthenticated, "unknown caller")
	}
	return h(context.WithValue(ctx, accountKey{}, accounts[auth[0]]), req)
}

// loseFirstAnswers plays a flaky network between client and server: the
// first answer to each key is lost after the server ran the call.
func loseFirstAnswers() grpc.UnaryServerInterceptor {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(ctx context.Context, req any, si *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		md, _ := metadata.FromIncomingContext(ctx)
		key := md.Get(grpcmw.MetadataKey)
		mu.Lock()
		defer mu.Unlock()
		if len(key) == 1 && !seen[key[0]] {
			seen[key[0]] = true
			return nil, status.Error(codes.Unavailable, "the answer was lost on the way")
		}
		return resp, err
	}
}

// retryPolicy is grpc-go's own retry policy for the service: it resends
// the call, with the key the client interceptor minted, on Unavailable
// and Aborted, following the server's pushback.
const retryPolicy = `{"methodConfig": [{"name": [{"service": "payments.v1.Payments"}], "retryPolicy": {
	"maxAttempts": 5, "initialBackoff": "0.05s", "maxBackoff": "1s", "backoffMultiplier": 2,
	"retryableStatusCodes": ["UNAVAILABLE", "ABORTED"]}}]}`

func run(w io.Writer, url string, payments int) error {
	rdb, where, closeRedis, err := openRedis(url)
	if err != nil {
		return err
	}
	defer closeRedis()
	// The embedded miniredis neither evicts nor persists: nothing for the
	// store's start-up check to warn about (a real Redis is checked).
	store, err := redisstore.New(rdb, redisstore.Options{NoStartupCheck: url == ""})
	if err != nil {
		return err
	}
	svc := &Payments{}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		loseFirstAnswers(), // outermost: the network
		authenticate,
		grpcmw.UnaryServerInterceptor(store, grpcmw.Options{
			Scope: func(ctx context.Context) (string, error) {
				if acct, _ := ctx.Value(accountKey{}).(string); acct != "" {
					return acct, nil
				}
				return "", errors.New("no account")
			},
			RetryAfter: 100 * time.Millisecond,
			Logger:     slog.New(slog.DiscardHandler),
		}),
	))
	srv.RegisterService(&paymentsDesc, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	fmt.Fprintf(w, "payments service on %s, %s\n", lis.Addr(), where)

	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(retryPolicy),
		grpc.WithChainUnaryInterceptor(grpcmw.UnaryClientInterceptor(grpcmw.ClientOptions{})))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok_alice")

	charge := func(ctx context.Context, amount float64) (*structpb.Struct, metadata.MD, error) {
		in, _ := structpb.NewStruct(map[string]any{"amount": amount})
		out, header := new(structpb.Struct), metadata.MD{}
		err := conn.Invoke(ctx, chargeMethod, in, out, grpc.Header(&header))
		return out, header, err
	}
	replays := 0
	for i := range payments {
		out, header, err := charge(ctx, float64(1000+i))
		if err != nil {
			return fmt.Errorf("payment %d: %w", i+1, err)
		}
		if grpcmw.Replayed(header) {
			replays++
		}
		fmt.Fprintf(w, "payment %d: %s amount %v, replayed %v\n", i+1,
			out.GetFields()["charge"].GetStringValue(), out.GetFields()["amount"].GetNumberValue(), grpcmw.Replayed(header))
	}
	fmt.Fprintf(w, "%d payments, %d provider charges, %d answers lost and replayed\n", payments, svc.charges.Load(), replays)

	// A key pinned by the caller: the second call is a duplicate.
	pinned := grpcmw.WithKey(ctx, "order-4711")
	_, _, err = charge(pinned, 250000)
	_, header, again := charge(pinned, 250000)
	fmt.Fprintf(w, "declined: %s %q; its retry: %s, replayed %v\n", status.Code(err), status.Convert(err).Message(),
		status.Code(again), grpcmw.Replayed(header))
	_, _, err = charge(pinned, 100)
	fmt.Fprintf(w, "the same key for another amount: %s (%s)\n", status.Code(err), reasonOf(err))
	if n := svc.charges.Load(); n != int64(payments) {
		return fmt.Errorf("%d charges for %d payments", n, payments)
	}
	return nil
}

func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetReason()
		}
	}
	return ""
}
