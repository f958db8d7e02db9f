package grpcmw_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkey/idemkey/grpcmw"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

// allCodes are the 17 gRPC codes, OK to Unauthenticated.
func allCodes() []codes.Code {
	var cs []codes.Code
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		cs = append(cs, c)
	}
	return cs
}

// DefaultFinal over every gRPC code: the deterministic ones are the
// outcome; the ones that say "try again" and the server's failures are not.
// Through the interceptor, a final code is stored and replayed (one run),
// any other releases the key (the retry runs again).
func TestDefaultFinalEveryCode(t *testing.T) {
	final := map[codes.Code]bool{
		codes.OK: true, codes.InvalidArgument: true, codes.NotFound: true, codes.AlreadyExists: true,
		codes.PermissionDenied: true, codes.FailedPrecondition: true, codes.OutOfRange: true, codes.Unauthenticated: true,
		// Released: transient, the server's failures, and the two decided
		// here: DataLoss (a server failure, the next run may not lose
		// data) and Unimplemented (a deploy may add the method).
		codes.Unavailable: false, codes.ResourceExhausted: false, codes.Aborted: false, codes.DeadlineExceeded: false,
		codes.Internal: false, codes.Unknown: false, codes.Canceled: false, codes.DataLoss: false, codes.Unimplemented: false,
	}
	require.Len(t, final, len(allCodes()), "every code is decided")
	for _, c := range allCodes() {
		require.Equal(t, final[c], grpcmw.DefaultFinal(c), "DefaultFinal(%s)", c)
	}

	var mu sync.Mutex
	runs := map[string]int{}
	h := start(t, func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
		code := codes.Code(in.GetFields()["code"].GetNumberValue())
		mu.Lock()
		runs[grpcmw.Key(ctx)]++
		mu.Unlock()
		if code == codes.OK {
			return structpb.NewStruct(map[string]any{"ok": true})
		}
		return nil, status.Error(code, "the handler says "+code.String())
	}, setup{})
	ctx := ctxT(t, 30*time.Second)
	for _, c := range allCodes() {
		t.Run(c.String(), func(t *testing.T) {
			key := "final-" + c.String()
			in := req(t, map[string]any{"code": float64(c)})
			first := h.call(ctx, key, in)
			require.Equal(t, c, status.Code(first.err), "%v", first.err)
			require.False(t, first.replayed())
			again := h.call(ctx, key, in)
			require.Equal(t, c, status.Code(again.err), "%v", again.err)
			if c != codes.OK {
				require.Equal(t, "the handler says "+c.String(), status.Convert(again.err).Message())
			}
			mu.Lock()
			n := runs[key]
			mu.Unlock()
			if final[c] {
				require.True(t, again.replayed(), "a final code is replayed")
				require.Equal(t, 1, n, "and the handler ran once")
			} else {
				require.False(t, again.replayed(), "a code that is not final is not stored")
				require.Equal(t, 2, n, "the retry runs the handler again")
			}
		})
	}
}

// The README's "Final codes" paragraph lists exactly DefaultFinal's codes,
// and its "Released" list every other.
func TestFinalCodesDocumented(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	para := regexp.MustCompile(`(?s)\*\*Final codes\*\*.*?\n\n`).Find(readme)
	require.NotNil(t, para, "no **Final codes** paragraph")
	stored, released, ok := strings.Cut(string(para), "Released:")
	require.True(t, ok, "no Released: list in %s", para)
	released, _, _ = strings.Cut(released, ".")
	names := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, w := range regexp.MustCompile("`([A-Za-z]+)`|\\bOK\\b").FindAllStringSubmatch(s, -1) {
			m[strings.Trim(w[0], "`")] = true
		}
		return m
	}
	storedNames, releasedNames := names(stored), names(released)
	delete(storedNames, "DefaultFinal")
	for _, c := range allCodes() {
		if grpcmw.DefaultFinal(c) {
			require.True(t, storedNames[c.String()], "README: %s is final, list it first", c)
			require.False(t, releasedNames[c.String()], "README: %s is final, not released", c)
		} else {
			require.True(t, releasedNames[c.String()], "README: %s is released: list it under Released", c)
			require.False(t, storedNames[c.String()], "README: %s is not final", c)
		}
	}
	require.Len(t, storedNames, 8)
	require.Len(t, releasedNames, len(allCodes())-8)
}

// A streaming method passes through the server untouched: no key is
// required, none is claimed, and a retry with the same key runs again.
func TestStreamsPassThrough(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store, err := redisstore.New(rdb, redisstore.Options{})
	require.NoError(t, err)
	var runs counter
	desc := grpc.ServiceDesc{
		ServiceName: "idemkey.test.Events",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Echo", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, stream grpc.ServerStream) error {
				runs.inc()
				for {
					in := new(structpb.Struct)
					if err := stream.RecvMsg(in); errors.Is(err, io.EOF) {
						return nil
					} else if err != nil {
						return err
					}
					if err := stream.SendMsg(in); err != nil {
						return err
					}
				}
			}}},
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(grpcmw.UnaryServerInterceptor(store,
		grpcmw.Options{Logger: slog.New(slog.DiscardHandler)})))
	gs.RegisterService(&desc, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })

	ctx := ctxT(t, 10*time.Second)
	echo := func(md ...string) (metadata.MD, string) {
		cs, err := conn.NewStream(metadata.AppendToOutgoingContext(ctx, md...), &desc.Streams[0], "/idemkey.test.Events/Echo")
		require.NoError(t, err)
		require.NoError(t, cs.SendMsg(req(t, map[string]any{"n": 1})))
		require.NoError(t, cs.CloseSend())
		out := new(structpb.Struct)
		require.NoError(t, cs.RecvMsg(out))
		require.ErrorIs(t, cs.RecvMsg(out), io.EOF)
		header, err := cs.Header()
		require.NoError(t, err)
		return header, out.String()
	}
	header, body := echo(grpcmw.MetadataKey, "stream-key", "authorization", "Bearer alice")
	require.False(t, grpcmw.Replayed(header))
	require.Contains(t, body, "n")
	header, _ = echo(grpcmw.MetadataKey, "stream-key", "authorization", "Bearer alice")
	require.False(t, grpcmw.Replayed(header), "not replayed: streams are not protected")
	echo() // no key, no credential: neither is asked for
	require.EqualValues(t, 3, runs.get(), "every stream ran")
	n, err := rdb.DBSize(ctx).Result()
	require.NoError(t, err)
	require.Zero(t, n, "nothing was claimed")
}
