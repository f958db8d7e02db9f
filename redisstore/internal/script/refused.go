package script

import (
	"context"
	"net"
	"runtime"
	"sync"
	"syscall"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// A refused connection is an answer: the server is not there. go-redis
// dials five times, 100ms apart, before a command learns it, and tries the
// command three more times, each with its own five dials: about 1.7s per
// command, longer than many deadlines, so the first claim after Redis goes
// down used to wait its whole deadline. FastRefusal's hook answers a
// refused dial at once instead: it hands go-redis a connection that fails
// every read and write with a Refused error, which go-redis does not try
// again (it would try a dial error again, and any net.Error), so the
// command fails in a millisecond, and Outage begins. Nothing else changes:
// a dial that fails otherwise (a timeout, an unknown host) is go-redis's.

// FastRefusal adds the refusal hook to c, a client that reaches one
// server, once per client however many stores share it.
func FastRefusal[C any, PC interface {
	*C
	AddHook(redis.Hook)
}](c PC) {
	k := weak.Make((*C)(c))
	if _, loaded := hooked.LoadOrStore(k, struct{}{}); loaded {
		return
	}
	runtime.AddCleanup((*C)(c), func(k weak.Pointer[C]) { hooked.Delete(k) }, k)
	c.AddHook(refusalHook{})
}

// hooked holds the clients with the hook, by weak pointer: a client that
// is gone takes its entry with it.
var hooked sync.Map

// refusalHook answers a refused dial at once (see FastRefusal).
type refusalHook struct{}

func (refusalHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil && isRefused(err) {
			return &refusedConn{err: &Refused{msg: err.Error()}, addr: refusedAddr{network, addr}}, nil
		}
		return conn, err
	}
}

func (refusalHook) ProcessHook(redis.ProcessHook) redis.ProcessHook { return nil }
func (refusalHook) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return nil
}

// Refused is the error of a command whose connection was refused (see
// FastRefusal): its text is the dial's, and it matches
// syscall.ECONNREFUSED with errors.Is. It wraps nothing else on purpose: a
// *net.OpError, or any error with a Timeout method, is one go-redis tries
// again.
type Refused struct{ msg string }

func (e *Refused) Error() string { return e.msg }

// Is reports whether target is syscall.ECONNREFUSED.
func (e *Refused) Is(target error) bool { return target == syscall.ECONNREFUSED }

// refusedConn is the connection to a server that refused it: every read
// and write fails with the refusal.
type refusedConn struct {
	err  error
	addr refusedAddr
}

func (c *refusedConn) Read([]byte) (int, error)         { return 0, c.err }
func (c *refusedConn) Write([]byte) (int, error)        { return 0, c.err }
func (c *refusedConn) Close() error                     { return nil }
func (c *refusedConn) LocalAddr() net.Addr              { return c.addr }
func (c *refusedConn) RemoteAddr() net.Addr             { return c.addr }
func (c *refusedConn) SetDeadline(time.Time) error      { return nil }
func (c *refusedConn) SetReadDeadline(time.Time) error  { return nil }
func (c *refusedConn) SetWriteDeadline(time.Time) error { return nil }

// refusedAddr is the address that refused.
type refusedAddr struct{ network, addr string }

func (a refusedAddr) Network() string { return a.network }
func (a refusedAddr) String() string  { return a.addr }
