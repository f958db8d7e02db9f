package bench

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkey/idemkey/grpcmw"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

// Run with: go -C bench test . -run '^$' -bench 'BenchmarkGRPC/rounds' -benchtime 100x -count 3
// (ratios), and -bench 'BenchmarkGRPC/(bare|first-execution|replay)$' -benchtime 2s (allocs/op).
//
// BenchmarkGRPC serves one unary handler over gRPC on loopback TCP three
// ways against one redis-server: bare (no interceptor), through grpcmw
// with a fresh key per call (a first execution: claim and complete), and
// through grpcmw cycling over 1000 stored keys (a replay: one claim that
// returns the outcome). Calls are made from 8 goroutines over one
// connection per server.
//
// Its "rounds" run interleaves the three, a burst of 400 calls each per
// round, so that the machine's drift (2 shared cores) hits them alike, and
// reports each one's throughput relative to bare: first/bare and
// replay/bare are ours' req/s over bare's, in one run. The sub-benchmarks
// bare, first-execution and replay run each alone, for ns/op and allocs/op.

const grpcBenchMethod = "/idemkey.bench.Payments/Charge"

var grpcBenchDesc = grpc.ServiceDesc{
	ServiceName: "idemkey.bench.Payments",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Charge", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(structpb.Struct)
		if err := dec(in); err != nil {
			return nil, err
		}
		if ic == nil {
			return grpcBenchCharge(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: grpcBenchMethod}, func(ctx context.Context, req any) (any, error) {
			return grpcBenchCharge(ctx, req.(*structpb.Struct))
		})
	}}},
}

// grpcBenchReply is the handler's answer, about 100 bytes encoded.
var grpcBenchReply, _ = structpb.NewStruct(map[string]any{
	"id": "ch_3MmlLrLkdIwHu7ix0snN0B15", "amount": 1200, "currency": "eur", "status": "succeeded", "customer": "cus_NffrFeUfNV2Hib"})

func grpcBenchCharge(context.Context, *structpb.Struct) (*structpb.Struct, error) {
	return grpcBenchReply, nil
}

// grpcBenchServe serves the handler, behind ic unless it is nil, and
// returns a connection to it.
func grpcBenchServe(b *testing.B, ic grpc.UnaryServerInterceptor) *grpc.ClientConn {
	var opts []grpc.ServerOption
	if ic != nil {
		opts = append(opts, grpc.UnaryInterceptor(ic))
	}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&grpcBenchDesc, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	b.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return conn
}

func BenchmarkGRPC(b *testing.B) {
	rdb := newRedisClient(redistest.Start(b).Addr())
	b.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, redisstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ic := grpcmw.UnaryServerInterceptor(store, grpcmw.Options{Scope: grpcmw.SharedScope("bench"), Logger: slog.New(slog.DiscardHandler)})
	in, _ := structpb.NewStruct(map[string]any{"amount": 1200, "currency": "eur", "customer": "cus_NffrFeUfNV2Hib"})

	// run calls the method from many goroutines, with key(i) for call i.
	run := func(b *testing.B, conn *grpc.ClientConn, key func(i int64) string) {
		var n atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(4)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			out := new(structpb.Struct)
			for pb.Next() {
				ctx := metadata.AppendToOutgoingContext(context.Background(), grpcmw.MetadataKey, key(n.Add(1)))
				if err := conn.Invoke(ctx, grpcBenchMethod, in, out); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	bare, ours := grpcBenchServe(b, nil), grpcBenchServe(b, ic)
	prefix := unique(b)
	const stored = 1000
	for i := range int64(stored) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), grpcmw.MetadataKey, prefix+"stored-"+strconv.FormatInt(i, 10))
		if err := ours.Invoke(ctx, grpcBenchMethod, in, new(structpb.Struct)); err != nil {
			b.Fatal(err)
		}
	}
	storedKey := func(i int64) string { return prefix + "stored-" + strconv.FormatInt(i%stored, 10) }

	b.Run("rounds", func(b *testing.B) {
		var fresh atomic.Int64
		contenders := []struct {
			name string
			conn *grpc.ClientConn
			key  func(int64) string
		}{
			{"bare", bare, func(i int64) string { return "k" + strconv.FormatInt(i, 10) }},
			{"first", ours, func(int64) string { return prefix + "fresh-" + strconv.FormatInt(fresh.Add(1), 10) }},
			{"replay", ours, storedKey},
		}
		spent := make([]time.Duration, len(contenders))
		const calls, workers = 400, 8
		for r := 0; b.Loop(); r++ {
			for j := range contenders {
				c := contenders[(j+r)%len(contenders)] // rotate who goes first
				start := time.Now()
				var next atomic.Int64
				var wg sync.WaitGroup
				for range workers {
					wg.Go(func() {
						out := new(structpb.Struct)
						for i := next.Add(1); i <= calls; i = next.Add(1) {
							ctx := metadata.AppendToOutgoingContext(context.Background(), grpcmw.MetadataKey, c.key(i))
							if err := c.conn.Invoke(ctx, grpcBenchMethod, in, out); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				spent[(j+r)%len(contenders)] += time.Since(start)
			}
		}
		n := float64(b.N * calls)
		for j, c := range contenders {
			b.ReportMetric(float64(spent[j].Nanoseconds())/n, c.name+"-ns/call")
		}
		b.ReportMetric(float64(spent[0])/float64(spent[1]), "first/bare")
		b.ReportMetric(float64(spent[0])/float64(spent[2]), "replay/bare")
	})
	b.Run("bare", func(b *testing.B) {
		run(b, bare, func(i int64) string { return "k" + strconv.FormatInt(i, 10) })
	})
	b.Run("first-execution", func(b *testing.B) {
		prefix := unique(b)
		run(b, ours, func(i int64) string { return prefix + strconv.FormatInt(i, 10) })
	})
	b.Run("replay", func(b *testing.B) { run(b, ours, storedKey) })
}
