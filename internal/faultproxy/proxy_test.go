package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/faultproxy"
	"github.com/idemkey/idemkey/internal/redistest"
)

// incr is a script that counts its runs, so a test can tell a lost reply
// (the server ran it) from a lost request (it did not).
var incr = redis.NewScript(`return redis.call('INCR', KEYS[1])`)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// setup starts a redis-server, a proxy in front of it, and a go-redis client
// of the proxy with opts applied.
func setup(t *testing.T, opts func(*redis.Options)) (*redistest.Server, *faultproxy.Proxy, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	o := &redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true}
	if opts != nil {
		opts(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return srv, p, c
}

func TestPassThrough(t *testing.T) {
	srv, p, c := setup(t, nil)
	ctx := ctxT(t, 10*time.Second)
	require.Equal(t, srv.Addr(), p.Target())
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	seen := p.Inject(faultproxy.Fault{Action: faultproxy.Pass, Match: faultproxy.Name("incr")})
	cmds, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for range 100 {
			pipe.Incr(ctx, "n")
		}
		pipe.Get(ctx, "k")
		return nil
	})
	require.NoError(t, err)
	require.Len(t, cmds, 101)
	require.EqualValues(t, 100, cmds[99].(*redis.IntCmd).Val())
	require.Equal(t, "v", cmds[100].(*redis.StringCmd).Val())
	require.Equal(t, 100, seen.Hits())
	require.GreaterOrEqual(t, p.Commands(), 102)
	require.Positive(t, p.Conns())

	// A large value crosses in many reads and writes.
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(i)
	}
	require.NoError(t, c.Set(ctx, "big", big, 0).Err())
	got, err := c.Get(ctx, "big").Bytes()
	require.NoError(t, err)
	require.Equal(t, big, got)
}

// TestLoseReply loses the reply to the second EVALSHA once: go-redis reads
// EOF, re-sends on a new connection and gets the second run's answer. The
// script ran twice for that call, which proves the first request reached the
// server.
func TestLoseReply(t *testing.T) {
	_, p, c := setup(t, nil)
	ctx := ctxT(t, 10*time.Second)
	require.NoError(t, incr.Load(ctx, c).Err())
	lose := p.Inject(faultproxy.Fault{Action: faultproxy.LoseReply, Match: faultproxy.Prefix("evalsha", incr.Hash()), Skip: 1, Times: 1})
	sent := p.Inject(faultproxy.Fault{Action: faultproxy.Pass, Match: faultproxy.Name("EVALSHA")})
	conns := p.Conns()

	var got []int64
	for range 3 {
		n, err := incr.Run(ctx, c, []string{"runs"}).Int64()
		require.NoError(t, err)
		got = append(got, n)
	}
	require.Equal(t, []int64{1, 3, 4}, got, "the second call's first run happened, its reply was lost")
	require.Equal(t, 1, lose.Hits())
	require.Equal(t, 3, sent.Hits(), "Pass rules after an applying rule do not see its command")
	require.Equal(t, conns+1, p.Conns(), "go-redis reconnected once")
	select {
	case <-lose.Fired():
	default:
		t.Fatal("Fired not closed")
	}
}

// TestLoseReplyWithoutRetry shows what the client sees: EOF, with the
// command done.
func TestLoseReplyWithoutRetry(t *testing.T) {
	_, p, c := setup(t, func(o *redis.Options) { o.MaxRetries = -1 })
	ctx := ctxT(t, 10*time.Second)
	require.NoError(t, c.Ping(ctx).Err())
	p.Inject(faultproxy.Fault{Action: faultproxy.LoseReply, Match: faultproxy.Name("INCR"), Times: 1})
	err := c.Incr(ctx, "n").Err()
	require.Error(t, err)
	require.True(t, errors.Is(err, syscall.ECONNRESET) || err.Error() == "EOF", "got %v", err)
	n, err := c.Get(ctx, "n").Int()
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// TestLoseReplyInPipeline loses the reply to the middle command of a
// pipeline: the replies before it arrive, the commands after it are never
// sent, and go-redis re-sends the whole pipeline.
func TestLoseReplyInPipeline(t *testing.T) {
	_, p, c := setup(t, nil)
	ctx := ctxT(t, 10*time.Second)
	require.NoError(t, c.Ping(ctx).Err())
	p.Inject(faultproxy.Fault{Action: faultproxy.LoseReply, Match: faultproxy.Prefix("incr", "middle"), Times: 1})
	_, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Incr(ctx, "first")
		pipe.Incr(ctx, "middle")
		pipe.Incr(ctx, "last")
		return nil
	})
	require.NoError(t, err)
	for key, want := range map[string]int{"first": 2, "middle": 2, "last": 1} {
		n, err := c.Get(ctx, key).Int()
		require.NoError(t, err)
		require.Equal(t, want, n, key)
	}
}

// TestBlackhole: calls into a blackhole end at their context's deadline,
// on new connections too; once the rule is removed, new connections work.
func TestBlackhole(t *testing.T) {
	_, p, c := setup(t, func(o *redis.Options) { o.MaxRetries = -1 })
	require.NoError(t, c.Ping(ctxT(t, 5*time.Second)).Err())
	hole := p.Inject(faultproxy.Fault{Action: faultproxy.Blackhole})

	for _, fresh := range []bool{false, true} {
		cl := c
		if fresh { // a new client must get through its handshake first
			cl = redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
			defer cl.Close()
		}
		// Held until the call's deadline: the error is the deadline's, not
		// a reply or a reset (a hold without a deadline would last until
		// the test ends).
		err := cl.Get(ctxT(t, 300*time.Millisecond), "k").Err()
		require.Error(t, err)
		require.True(t, errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded), "got %v", err)
	}
	require.Equal(t, 2, hole.Hits())

	hole.Remove()
	require.Eventually(t, func() bool { return c.Set(ctxT(t, time.Second), "k", "v", 0).Err() == nil },
		5*time.Second, 10*time.Millisecond)
}

// rawConn connects to the proxy without a client library, to see exactly
// what arrives: go-redis fails a whole pipeline on a network error, replies
// received included.
func rawConn(t *testing.T, p *faultproxy.Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	return c, bufio.NewReader(c)
}

// TestBlackholeOne swallows one GET in a pipeline: the reply to the command
// before it arrives, nothing after it does, and the connection stays open.
func TestBlackholeOne(t *testing.T) {
	_, p, c := setup(t, nil)
	p.Inject(faultproxy.Fault{Action: faultproxy.Blackhole, Match: faultproxy.Name("GET"), Times: 1})
	conn, r := rawConn(t, p)
	_, err := conn.Write([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\nGET k\r\nPING\r\n"))
	require.NoError(t, err)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "+OK\r\n", line)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	_, err = r.ReadByte()
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "no reply after the blackhole, and no close")

	// The rule is spent: other connections get their GET answered.
	v, err := c.Get(ctxT(t, 5*time.Second), "k").Result()
	require.NoError(t, err)
	require.Equal(t, "v", v)
}

// TestReset resets the connection instead of forwarding INCR: the client
// sees the connection fail (go-redis reports EOF), the server never saw the
// command, and go-redis with retries gets through on a new connection.
func TestReset(t *testing.T) {
	_, p, c := setup(t, func(o *redis.Options) { o.MaxRetries = -1 })
	ctx := ctxT(t, 10*time.Second)
	require.NoError(t, c.Ping(ctx).Err())
	r := p.Inject(faultproxy.Fault{Action: faultproxy.Reset, Match: faultproxy.Name("INCR"), Times: 1})
	require.Error(t, c.Incr(ctx, "n").Err())
	require.Equal(t, 1, r.Hits())
	n, err := c.Incr(ctx, "n").Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the reset INCR never reached the server")

	// With retries, go-redis hides the reset.
	retrying := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	defer retrying.Close()
	p.Inject(faultproxy.Fault{Action: faultproxy.Reset, Match: faultproxy.Name("INCR"), Times: 1})
	n, err = retrying.Incr(ctx, "n").Result()
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
}

// TestResetAfterPipelinedReplies: the replies to the commands before the
// reset one reach the client, then a TCP reset.
func TestResetAfterPipelinedReplies(t *testing.T) {
	_, p, c := setup(t, nil)
	p.Inject(faultproxy.Fault{Action: faultproxy.Reset, Match: faultproxy.Prefix("INCR", "b"), Times: 1})
	conn, r := rawConn(t, p)
	_, err := conn.Write([]byte("INCR a\r\nINCR b\r\nINCR c\r\n"))
	require.NoError(t, err)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, ":1\r\n", line)
	_, err = r.ReadByte()
	require.ErrorIs(t, err, syscall.ECONNRESET)
	for key, want := range map[string]int64{"a": 1, "b": 0, "c": 0} {
		n, err := c.Exists(ctxT(t, 5*time.Second), key).Result()
		require.NoError(t, err)
		require.Equal(t, want, n, key)
	}
}

func TestResetConns(t *testing.T) {
	_, p, c := setup(t, func(o *redis.Options) { o.MaxRetries = -1 })
	ctx := ctxT(t, 10*time.Second)
	require.NoError(t, c.Ping(ctx).Err())
	conns := p.Conns()
	p.ResetConns()
	// go-redis checks a pooled connection before using it, finds it reset
	// and dials again.
	require.NoError(t, c.Ping(ctx).Err())
	require.Equal(t, conns+1, p.Conns())

	conn, r := rawConn(t, p)
	_, err := conn.Write([]byte("PING\r\n"))
	require.NoError(t, err)
	_, err = r.ReadString('\n')
	require.NoError(t, err)
	p.ResetConns()
	_, err = r.ReadByte()
	require.ErrorIs(t, err, syscall.ECONNRESET)
}

// TestDelay: a delayed command's round trip takes at least the delay; a
// pipeline of delayed commands is held once, not once per command.
func TestDelay(t *testing.T) {
	_, p, c := setup(t, nil)
	ctx := ctxT(t, 20*time.Second)
	require.NoError(t, c.Ping(ctx).Err())
	const d = 200 * time.Millisecond
	slow := p.Inject(faultproxy.Fault{Action: faultproxy.Delay, Delay: d, Match: faultproxy.Name("INCR")})

	start := time.Now()
	require.NoError(t, c.Incr(ctx, "n").Err())
	require.GreaterOrEqual(t, time.Since(start), d)

	start = time.Now()
	_, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for range 10 {
			pipe.Incr(ctx, "n")
		}
		return nil
	})
	require.NoError(t, err)
	took := time.Since(start)
	require.GreaterOrEqual(t, took, d)
	require.Less(t, took, 5*d, "delays of commands sent together do not add up")
	require.Equal(t, 11, slow.Hits())

	// A call's deadline shorter than the delay ends it.
	err = c.Incr(ctxT(t, d/4), "n").Err()
	require.Error(t, err)

	slow.Remove()
	start = time.Now()
	require.NoError(t, c.Incr(ctx, "n").Err())
	t.Logf("round trip without delay: %v", time.Since(start))
}

// TestClusterDialer runs a cluster client through one proxy per node: the
// first EVALSHA each master gets loses its reply, and the cluster client
// re-sends it.
func TestClusterDialer(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	var proxies []*faultproxy.Proxy
	var rules []*faultproxy.Rule
	for _, addr := range cl.Addrs() {
		p := faultproxy.Start(t, addr)
		proxies = append(proxies, p)
		rules = append(rules, p.Inject(faultproxy.Fault{Action: faultproxy.LoseReply, Match: faultproxy.Name("EVALSHA"), Times: 1}))
	}
	opts := cl.Options()
	opts.Dialer = faultproxy.Dialer(proxies...)
	c := redis.NewClusterClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t, 20*time.Second)
	require.NoError(t, c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return incr.Load(ctx, m).Err()
	}))

	for i := range 30 {
		key := fmt.Sprintf("k%d", i)
		_, err := incr.Run(ctx, c, []string{key}).Result()
		require.NoError(t, err)
	}
	total := 0
	for i := range 30 {
		n, err := c.Get(ctx, fmt.Sprintf("k%d", i)).Int()
		require.NoError(t, err)
		total += n
	}
	for i, r := range rules {
		require.Equal(t, 1, r.Hits(), "node %d", i)
		require.Positive(t, proxies[i].Conns())
	}
	require.Equal(t, 33, total, "each master ran one script twice")
}

// TestClose ends every connection and goroutine, blackholed and delayed
// ones included.
func TestClose(t *testing.T) {
	srv := redistest.Start(t)
	p, err := faultproxy.New(srv.Addr())
	require.NoError(t, err)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, PoolSize: 4})
	defer c.Close()
	ctx := ctxT(t, 10*time.Second)
	require.NoError(t, c.Ping(ctx).Err())
	p.Inject(faultproxy.Fault{Action: faultproxy.Blackhole, Match: faultproxy.Name("GET")})
	p.Inject(faultproxy.Fault{Action: faultproxy.Delay, Delay: time.Hour, Match: faultproxy.Name("INCR")})
	errs := make(chan error, 2)
	go func() { errs <- c.Get(ctx, "k").Err() }()
	go func() { errs <- c.Incr(ctx, "n").Err() }()
	require.Eventually(t, func() bool { return p.Commands() >= 3 }, 5*time.Second, 5*time.Millisecond)

	// Close does not wait for the held commands (an hour's delay, a
	// blackhole that never ends).
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("Close waited for the held commands")
	}
	for range 2 {
		require.Error(t, <-errs)
	}
	require.NoError(t, p.Close(), "a second Close does nothing")
	_, err = net.DialTimeout("tcp", p.Addr(), time.Second)
	require.Error(t, err, "nothing listens after Close")
}

func TestNewRejects(t *testing.T) {
	for _, target := range []string{"10.0.0.1:6379", "example.com:6379", "nonsense"} {
		_, err := faultproxy.New(target)
		require.Error(t, err, target)
	}
	p, err := faultproxy.New("[::1]:1")
	require.NoError(t, err)
	require.NoError(t, p.Close())
	require.Panics(t, func() { p.Inject(faultproxy.Fault{}) })
	require.Panics(t, func() { p.Inject(faultproxy.Fault{Action: faultproxy.Delay}) })
	require.Panics(t, func() { p.Inject(faultproxy.Fault{Action: faultproxy.Reset, Skip: -1}) })
	require.Equal(t, "LoseReply", faultproxy.LoseReply.String())
}

// TestCloseEndsGoroutines: every goroutine the proxy started has ended when
// Close returns, whatever state its connections were in.
func TestCloseEndsGoroutines(t *testing.T) {
	srv := redistest.Start(t)
	before := runtime.NumGoroutine()
	p, err := faultproxy.New(srv.Addr())
	require.NoError(t, err)
	p.Inject(faultproxy.Fault{Action: faultproxy.Blackhole, Match: faultproxy.Prefix("GET", "hole")})
	p.Inject(faultproxy.Fault{Action: faultproxy.Delay, Delay: time.Hour, Match: faultproxy.Prefix("GET", "slow")})
	p.Inject(faultproxy.Fault{Action: faultproxy.LoseReply, Match: faultproxy.Prefix("GET", "lost")})
	var conns []net.Conn
	for _, cmd := range []string{"PING", "GET hole", "GET slow", "GET lost", "*1\r\n$3\r\nPI"} {
		c, err := net.Dial("tcp", p.Addr())
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Write([]byte(cmd + "\r\n"))
		require.NoError(t, err)
		conns = append(conns, c)
	}
	require.Eventually(t, func() bool { return p.Commands() == 4 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, p.Close())
	for _, c := range conns {
		_ = c.Close()
	}
	// Polled here, not with require.Eventually, whose own goroutine counts.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), before)
}
