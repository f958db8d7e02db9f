package grpcmw_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkey/idemkey/grpcmw"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

const crashRedisEnv = "GRPCMW_CRASH_HELPER_REDIS"

// crashLease is the lease of both servers of TestTakeoverAfterCrash: the
// crashed owner's key is taken over this long after its last sign of life.
const crashLease = 600 * time.Millisecond

// chargeOnce is the payment handler of the crash test: it charges the
// provider (a counter in Redis, the side effect) unless an earlier attempt
// checkpointed the charge, and then records the payment. crash, when not
// nil, is called between the two, to die there.
func chargeOnce(rdb *redis.Client, crash func()) handler {
	return func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
		point, data := grpcmw.RecoveryPoint(ctx)
		charge := string(data)
		if point != "charged" {
			n, err := rdb.Incr(ctx, "test:provider-charges").Result()
			if err != nil {
				return nil, status.Error(codes.Unavailable, err.Error())
			}
			charge = fmt.Sprintf("ch_%d", n)
			if err := grpcmw.Checkpoint(ctx, "charged", []byte(charge)); err != nil {
				return nil, status.Error(codes.Unavailable, err.Error())
			}
		}
		if crash != nil {
			crash()
		}
		return structpb.NewStruct(map[string]any{"charge": charge, "attempt": grpcmw.Attempt(ctx)})
	}
}

// TestCrashHelperProcess is the server process that TestTakeoverAfterCrash
// kills: it serves chargeOnce, says when it has checkpointed, and hangs.
func TestCrashHelperProcess(t *testing.T) {
	addr := os.Getenv(crashRedisEnv)
	if addr == "" {
		t.Skip("the server process of TestTakeoverAfterCrash")
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	store, err := redisstore.New(rdb, redisstore.Options{Lease: crashLease})
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.UnaryInterceptor(grpcmw.UnaryServerInterceptor(store, grpcmw.Options{})))
	srv.RegisterService(&paymentsDesc, chargeOnce(rdb, func() {
		fmt.Println("checkpointed")
		select {} // hang until killed
	}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	fmt.Println("listening", lis.Addr())
	_ = srv.Serve(lis)
}

// A server process killed after its handler charged and checkpointed: the
// retry, on another server, waits out the lease, takes the key over as
// attempt 2, resumes from the checkpoint without charging again, and every
// retry after it gets the replay.
func TestTakeoverAfterCrash(t *testing.T) {
	rs := redistest.Start(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashRedisEnv+"="+rs.Addr())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the server process ended early")
			return l
		case <-time.After(30 * time.Second):
			t.Fatal("the server process said nothing")
			return ""
		}
	}
	addr, ok := strings.CutPrefix(next(), "listening ")
	require.True(t, ok)

	// The first attempt, on the process about to crash.
	crashing := &harness{redis: rs}
	crashing.conn, err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecureCreds()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = crashing.conn.Close() })
	ctx := ctxT(t, 30*time.Second)
	in := req(t, map[string]any{"amount": 1200})
	first := make(chan answer, 1)
	go func() { first <- crashing.call(ctx, "key-crash", in) }()
	require.Equal(t, "checkpointed", next())
	require.NoError(t, cmd.Process.Kill())
	require.Equal(t, codes.Unavailable, status.Code((<-first).err), "the connection died with the process")

	// The retry, on a server of its own, with the same key.
	rdb := rs.Client(t)
	survivor := start(t, chargeOnce(rdb, nil), setup{redis: rs, store: redisstore.Options{Lease: crashLease},
		server: grpcmw.Options{RetryAfter: 50 * time.Millisecond}})
	var a answer
	inProgress := 0
	eventually(t, 10*time.Second, func() bool {
		a = survivor.call(ctx, "key-crash", in)
		if status.Code(a.err) == codes.Aborted {
			inProgress++
			return false
		}
		return true
	}, "the retry took over")
	require.NoError(t, a.err)
	require.Positive(t, inProgress, "the crashed owner's lease held the key until it ran out")
	require.False(t, a.replayed())
	require.Equal(t, "ch_1", a.resp.GetFields()["charge"].GetStringValue())
	require.EqualValues(t, 2, a.resp.GetFields()["attempt"].GetNumberValue())
	charges, err := rdb.Get(ctx, "test:provider-charges").Int()
	require.NoError(t, err)
	require.Equal(t, 1, charges, "the provider was charged once")

	again := survivor.call(ctx, "key-crash", in)
	require.NoError(t, again.err)
	require.True(t, again.replayed())
	require.Equal(t, "ch_1", again.resp.GetFields()["charge"].GetStringValue())
}
