package redistest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	requireEnv   = "IDEMKEY_REQUIRE_REDIS"
	startTimeout = 10 * time.Second // per launch, until the server answers PING
	stopTimeout  = 10 * time.Second // graceful Stop before falling back to SIGKILL
	bindAttempts = 5                // fresh ports tried when the chosen one is taken
	pollInterval = 20 * time.Millisecond
	tailBytes    = 4096
)

// errAddrInUse marks a launch that failed because another process owns the port.
var errAddrInUse = errors.New("port already in use")

// Option configures Start and StartCluster.
type Option func(*config)

type config struct {
	args     []string
	replicas int // per cluster master
}

// Args returns an Option that appends extra redis-server command-line
// arguments, such as Args("--appendonly", "yes"). They come after the
// defaults, so they override them.
func Args(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// NoFullCoverage returns an Option that sets cluster-require-full-coverage to
// no, so cluster masters keep serving their slots while another master is down.
func NoFullCoverage() Option {
	return Args("--cluster-require-full-coverage", "no")
}

// Replicas returns an Option that gives every master of a cluster n
// replicas: StartCluster(t, 3, Replicas(1)) starts 3 masters and 3 replicas.
// Start, Launch and the sentinel topologies ignore it. Default: 0.
func Replicas(n int) Option {
	return func(c *config) { c.replicas = n }
}

// Binary returns the path of redis-server. If it is not on PATH, Binary skips
// the test, or fails it when the environment sets IDEMKEY_REQUIRE_REDIS=1.
func Binary(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err == nil {
		return path
	}
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("redistest: redis-server not found on PATH (%v) and %s=1 requires it", err, requireEnv)
	}
	t.Skip("redistest: redis-server not found on PATH; install redis-server or set IDEMKEY_REQUIRE_REDIS=1 to make this a failure")
	return ""
}

// Server is a private redis-server process listening on 127.0.0.1. Its
// methods are meant to be called from the test goroutine; they are also safe
// for concurrent use.
type Server struct {
	bin, dir, logPath string
	extra             []string
	port, busPort     int // busPort is the cluster bus port, 0 for a standalone server
	cluster           bool
	sentinelConf      string // the config file of a sentinel, "" for a data node

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed once cmd has exited and been reaped
	paused bool
}

// Start starts a private redis-server on a free loopback port, without
// persistence, with its files in a fresh t.TempDir, and waits until it answers
// PING. The server is killed when the test finishes.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := newServer(Binary(t), t.TempDir(), false, opts)
	t.Cleanup(s.Kill) // registered after TempDir, so it runs before the directory is removed
	if err := s.startFresh(); err != nil {
		t.Fatal(err)
	}
	return s
}

// Launch is Start for programs outside tests, such as benchmark runners: the
// server keeps its files in dir (which must exist), and the caller must Close
// it. It fails if redis-server is not on PATH.
func Launch(dir string, opts ...Option) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	s := newServer(bin, dir, false, opts)
	if err := s.startFresh(); err != nil {
		return nil, err
	}
	return s, nil
}

// Close kills the server; it is Kill, for servers from Launch.
func (s *Server) Close() { s.Kill() }

func configure(opts []Option) config {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

func newServer(bin, dir string, cluster bool, opts []Option) *Server {
	cfg := configure(opts)
	s := &Server{bin: bin, dir: dir, extra: cfg.args, cluster: cluster}
	s.logPath = filepath.Join(s.dir, "redistest.log")
	return s
}

// startFresh launches the server on free ports, trying new ones if a port
// turns out to be taken.
func (s *Server) startFresh() error {
	var err error
	for range bindAttempts {
		if s.port, s.busPort, err = freePorts(s.cluster); err != nil {
			return fmt.Errorf("redistest: pick a free port: %w", err)
		}
		if err = s.launch(); !errors.Is(err, errAddrInUse) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("redistest: start redis-server: %w\n--- server output (tail) ---\n%s", err, s.Tail())
	}
	return nil
}

// freePorts returns a free loopback port, plus a second one for the cluster
// bus when cluster is set. The ports are released before redis-server binds
// them, so launch detects and reports a lost race.
func freePorts(cluster bool) (port, busPort int, err error) {
	n := 1
	if cluster {
		n = 2
	}
	ports := make([]int, 2)
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, 0, err
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports[0], ports[1], nil
}

func (s *Server) argv() []string {
	var a []string
	if s.sentinelConf != "" {
		a = []string{s.sentinelConf, "--sentinel"}
	}
	a = append(a,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
	)
	if s.busPort != 0 {
		a = append(a, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000", "--cluster-port", strconv.Itoa(s.busPort))
	}
	return append(a, s.extra...)
}

// launch starts the process and waits until it answers PING. On failure the
// process is killed; the error wraps errAddrInUse if the port was taken.
func (s *Server) launch() error {
	f, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := s.argv()
	fmt.Fprintf(f, "--- redistest: %s %q\n", s.bin, args)
	offset, _ := f.Seek(0, io.SeekEnd)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = s.dir, f, f
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	f.Close() // the child keeps its own descriptor
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done, s.paused = cmd, done, false
	s.mu.Unlock()

	err = s.waitReady(cmd, done)
	if err == nil {
		return nil
	}
	s.Kill()
	if out, _ := os.ReadFile(s.logPath); int64(len(out)) >= offset &&
		strings.Contains(string(out[offset:]), "Address already in use") {
		err = fmt.Errorf("%w: %v", errAddrInUse, err)
	}
	return err
}

// waitReady polls until the server answers PING and INFO reports cmd's pid,
// so a different server that happens to own the port is never mistaken for it.
func (s *Server) waitReady(cmd *exec.Cmd, done <-chan struct{}) error {
	c := redis.NewClient(&redis.Options{
		Addr: s.Addr(), MaxRetries: -1, PoolSize: 1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		if last = c.Ping(ctx).Err(); last == nil {
			info, err := c.Info(ctx, "server").Result()
			if err == nil {
				if strings.Contains(info, fmt.Sprintf("\nprocess_id:%d\r", cmd.Process.Pid)) {
					return nil
				}
				return fmt.Errorf("%w: another process answers on %s", errAddrInUse, s.Addr())
			}
			last = err
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server exited during startup: %v", cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("redis-server on %s did not answer PING within %v: %v", s.Addr(), startTimeout, last)
		case <-tick.C:
		}
	}
}

// Addr returns the server address, "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the TCP port the server listens on. It stays the same across
// restarts.
func (s *Server) Port() int { return s.port }

// Dir returns the server's working directory, where it keeps its data files
// and the redistest.log file with its output.
func (s *Server) Dir() string { return s.dir }

// Options returns fresh go-redis options for a client of the server, with
// ContextTimeoutEnabled set. Callers may adjust them before redis.NewClient.
func (s *Server) Options() *redis.Options {
	return &redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true}
}

// Client returns a new go-redis client built from Options. It is closed when
// the test finishes.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(s.Options())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Running reports whether the server process is alive (paused counts as alive).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked()
}

func (s *Server) runningLocked() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// signalLocked sends sig to the server's process group, which includes any
// child it forked, falling back to the process itself.
func (s *Server) signalLocked(sig syscall.Signal) {
	if syscall.Kill(-s.cmd.Process.Pid, sig) != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Kill kills the server with SIGKILL and waits for it to exit. It does
// nothing if the server is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return
	}
	s.signalLocked(syscall.SIGKILL)
	<-s.done
	s.paused = false
}

// Stop shuts the server down gracefully with SIGTERM (resuming it first if it
// is paused) and waits for it to exit, resorting to SIGKILL after 10 seconds.
// It does nothing if the server is not running.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return
	}
	if s.paused {
		s.signalLocked(syscall.SIGCONT)
		s.paused = false
	}
	s.signalLocked(syscall.SIGTERM)
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-s.done:
	case <-timer.C:
		s.signalLocked(syscall.SIGKILL)
		<-s.done
	}
}

// Restart starts the server again on the same port with the same arguments
// and directory, and waits until it answers PING. A running server is killed
// first. Without persistence the restarted server is empty.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	if err := s.launch(); err != nil {
		t.Fatalf("redistest: restart redis-server on %s: %v\n--- server output (tail) ---\n%s", s.Addr(), err, s.Tail())
	}
}

// Pause stops the server with SIGSTOP, so it accepts connections but never
// answers, like a hung server. It does nothing unless the server is running
// and not paused.
func (s *Server) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runningLocked() && !s.paused {
		s.signalLocked(syscall.SIGSTOP)
		s.paused = true
	}
}

// Resume continues a paused server with SIGCONT. It does nothing unless the
// server is paused.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runningLocked() && s.paused {
		s.signalLocked(syscall.SIGCONT)
		s.paused = false
	}
}

// Tail returns the last few kilobytes of the server's output across all its
// launches, for failure messages.
func (s *Server) Tail() string {
	out, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no output: %v)", err)
	}
	if len(out) > tailBytes {
		out = out[len(out)-tailBytes:]
	}
	return string(out)
}

// WaitReplicas waits until n replicas acknowledge a write on s (a SET of a
// probe key followed by WAIT on the same connection), so that a test's own
// writes are not the first a freshly synced replica sees.
func WaitReplicas(t testing.TB, s *Server, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := waitAcks(ctx, s, n); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// waitAcks waits until n replicas acknowledge a write on s, or ctx is done.
func waitAcks(ctx context.Context, s *Server, n int) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), PoolSize: 1, MaxRetries: -1})
	defer c.Close()
	probe := 0
	return poll(ctx, func(ctx context.Context) error {
		pipe := c.Pipeline()
		set := pipe.Set(ctx, fmt.Sprintf("redistest:replica-probe:%d", probe), time.Now().UnixNano(), time.Minute)
		wait := pipe.Do(ctx, "wait", n, 100)
		_, _ = pipe.Exec(ctx)
		if _, moved := redis.IsMovedError(set.Err()); moved {
			probe++ // a cluster master: find a key in one of its slots
		}
		// Without a write, WAIT has nothing to wait for and counts every
		// replica connected.
		err := set.Err()
		acked := 0
		if err == nil {
			acked, err = wait.Int()
		}
		if err == nil && acked < n {
			err = fmt.Errorf("%d of %d replicas acknowledged", acked, n)
		}
		if err != nil {
			return fmt.Errorf("replicas of %s: %w", s.Addr(), err)
		}
		return nil
	})
}

// poll calls check every pollInterval until it returns nil, or until ctx is
// done: then it returns check's last error.
func poll(ctx context.Context, check func(context.Context) error) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (after %v)", err, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// dirMaker returns a function that creates and returns dir/node0,
// dir/node1, ... on successive calls, for the Launch functions.
func dirMaker(dir string) func() string {
	n := 0
	return func() string {
		d := filepath.Join(dir, fmt.Sprintf("node%d", n))
		n++
		_ = os.MkdirAll(d, 0o755)
		return d
	}
}
