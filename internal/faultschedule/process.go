package faultschedule

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/redisstore"
)

// The environment of an instance run as a process of its own
// (Config.Processes): the test binary, started again with
// ChildEnv set, serves as one instance (ChildMain) instead of running the
// tests.
const (
	// ChildEnv names the instance; its presence makes the binary a child.
	ChildEnv       = "IDEMKEY_SCHEDULE_CHILD"
	childRedisEnv  = "IDEMKEY_SCHEDULE_REDIS"
	childLedgerEnv = "IDEMKEY_SCHEDULE_LEDGER"
	childLeaseEnv  = "IDEMKEY_SCHEDULE_LEASE"
	childSlowEnv   = "IDEMKEY_SCHEDULE_SLOW"
)

// ChildMain serves one instance of the test service with the real store,
// as the environment says (ChildEnv and the others), and prints
// "listening ADDR" once it accepts requests. It returns only on an error,
// with the exit status; the parent ends it with a signal. A test binary
// calls it from an init function when ChildEnv is set.
func ChildMain() int {
	lease, err := time.ParseDuration(os.Getenv(childLeaseEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "lease:", err)
		return 2
	}
	slow, _ := time.ParseDuration(os.Getenv(childSlowEnv))
	ledger, err := appendLedger(os.Getenv(childLedgerEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(childRedisEnv), DialTimeout: time.Second, ReadTimeout: time.Second,
		WriteTimeout: time.Second, PoolTimeout: time.Second, ContextTimeoutEnabled: true})
	svc := newService(os.Getenv(ChildEnv), ledger, &Plan{Slow: slow})
	h, _, err := Real(redisstore.Options{Lease: lease})(svc, rdb)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Printf("listening %s\n", ln.Addr())
	err = http.Serve(ln, svc.front(h))
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// appendLedger opens the ledger a parent created, to append to it.
func appendLedger(path string) (*Ledger, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, err
	}
	return &Ledger{f: f, path: path}, nil
}

// child is an instance running as a process.
type child struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{}

	mu     sync.Mutex
	paused bool
}

// startChild starts the test binary as the instance name, reaching Redis
// at redisAddr, and waits until it listens.
func startChild(name, redisAddr, ledgerPath string, lease, slow time.Duration) (*child, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ChildEnv+"="+name, childRedisEnv+"="+redisAddr, childLedgerEnv+"="+ledgerPath,
		childLeaseEnv+"="+lease.String(), childSlowEnv+"="+slow.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(c.done)
	}()
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		for sc.Scan() { // drain, so the child never blocks on its output
		}
	}()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case l, ok := <-line:
		addr, found := strings.CutPrefix(l, "listening ")
		if !ok || !found {
			c.kill()
			return nil, fmt.Errorf("child %s: no listening line (%q)", name, l)
		}
		c.url = "http://" + addr
		return c, nil
	case <-timer.C:
		c.kill()
		return nil, fmt.Errorf("child %s: not listening after 30s", name)
	}
}

// kill sends SIGKILL (continuing it first if it is stopped) and waits for
// the process to exit.
func (c *child) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

func (c *child) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.paused {
		_ = c.cmd.Process.Signal(syscall.SIGSTOP)
		c.paused = true
	}
}

func (c *child) cont() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused {
		_ = c.cmd.Process.Signal(syscall.SIGCONT)
		c.paused = false
	}
}
