package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name under which the sentinels of a Sentinel monitor
// their master; FailoverOptions.MasterName must be set to it.
const MasterName = "idemkey"

const (
	sentinelCount  = 3
	sentinelQuorum = 2
	dataNodes      = 3 // one master, two replicas
	// downAfter is how long a master must be unreachable before a sentinel
	// considers it down (sentinel down-after-milliseconds).
	downAfter = 1000 * time.Millisecond
	// sentinelFailoverTimeout is the sentinels' failover-timeout: how long a
	// failover may take, and half the pause before the sentinels start
	// another one for the same master after a failover.
	sentinelFailoverTimeout = 2000 * time.Millisecond
)

// Sentinel is a private Redis Sentinel deployment on 127.0.0.1: one master,
// two replicas and three sentinels that monitor them as MasterName with a
// quorum of two, a down-after of 1 s and a failover-timeout of 2 s, so that a
// dead master is replaced within a few seconds.
//
// Data node indexes are fixed at start: node 0 starts as the master, nodes 1
// and 2 as its replicas. Failover and KillMaster change who is master, not
// the indexes. The methods are safe for concurrent use, but failovers should
// not overlap.
type Sentinel struct {
	nodes     []*Server
	sentinels []*Server
}

// StartSentinel starts a Sentinel deployment and waits until both replicas
// acknowledge writes and every sentinel monitors the master, knows both
// replicas as in sync and knows the two other sentinels. Options apply to the
// data nodes, not the sentinels. Everything is killed when the test finishes.
// Startup takes well under a second: each sentinel's configuration lists the
// others, so they need not discover each other.
func StartSentinel(t testing.TB, opts ...Option) *Sentinel {
	t.Helper()
	bin := Binary(t)   // skip before starting anything
	dir := t.TempDir() // before Close: see StartCluster
	s := &Sentinel{}
	t.Cleanup(s.Close)
	if err := s.start(bin, dirMaker(dir), opts); err != nil {
		t.Fatal(err)
	}
	return s
}

// LaunchSentinel is StartSentinel for programs outside tests: the data nodes
// keep their files in dir/node0 to dir/node2 and the sentinels in dir/node3
// to dir/node5, and the caller must Close the deployment. It fails if
// redis-server is not on PATH.
func LaunchSentinel(dir string, opts ...Option) (*Sentinel, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	s := &Sentinel{}
	if err := s.start(bin, dirMaker(dir), opts); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close kills every data node and sentinel.
func (s *Sentinel) Close() {
	for _, n := range append(s.sentinels, s.nodes...) {
		n.Kill()
	}
}

func (s *Sentinel) start(bin string, mkdir func() string, opts []Option) error {
	// Sync replicas (and demoted masters) at once, not after the default 5 s
	// diskless-sync delay; callers' options come after, so they can override.
	opts = append([]Option{Args("--repl-diskless-sync-delay", "0")}, opts...)
	master := newServer(bin, mkdir(), false, opts)
	s.nodes = append(s.nodes, master)
	if err := master.startFresh(); err != nil {
		return err
	}
	for range dataNodes - 1 {
		r := newServer(bin, mkdir(), false, append(opts[:len(opts):len(opts)], Args("--replicaof", "127.0.0.1", strconv.Itoa(master.port))))
		s.nodes = append(s.nodes, r)
		if err := r.startFresh(); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := waitAcks(ctx, master, dataNodes-1); err != nil {
		return s.failure("%v", err)
	}
	dirs := make([]string, sentinelCount)
	for i := range dirs {
		dirs[i] = mkdir()
	}
	var err error
	for range bindAttempts {
		if err = s.launchSentinels(bin, dirs, master.port); !errors.Is(err, errAddrInUse) {
			break
		}
	}
	if err != nil {
		return s.failure("start sentinels: %v", err)
	}
	if err := poll(ctx, s.ready); err != nil {
		return s.failure("sentinels not ready within %v: %v", clusterTimeout, err)
	}
	return nil
}

// launchSentinels starts the sentinels on fresh ports, each configured with
// the master and with the other sentinels, whose IDs it makes up.
func (s *Sentinel) launchSentinels(bin string, dirs []string, masterPort int) error {
	for _, n := range s.sentinels {
		n.Kill()
	}
	s.sentinels = s.sentinels[:0]
	ports, err := distinctPorts(sentinelCount)
	if err != nil {
		return err
	}
	ids := make([]string, sentinelCount)
	for i := range ids {
		var b [20]byte // a sentinel ID is 40 hex digits
		_, _ = rand.Read(b[:])
		ids[i] = hex.EncodeToString(b[:])
	}
	for i, dir := range dirs {
		var conf strings.Builder
		fmt.Fprintf(&conf, "sentinel myid %s\n", ids[i])
		fmt.Fprintf(&conf, "sentinel monitor %s 127.0.0.1 %d %d\n", MasterName, masterPort, sentinelQuorum)
		fmt.Fprintf(&conf, "sentinel down-after-milliseconds %s %d\n", MasterName, downAfter.Milliseconds())
		fmt.Fprintf(&conf, "sentinel failover-timeout %s %d\n", MasterName, sentinelFailoverTimeout.Milliseconds())
		for j := range sentinelCount {
			if j != i {
				fmt.Fprintf(&conf, "sentinel known-sentinel %s 127.0.0.1 %d %s\n", MasterName, ports[j], ids[j])
			}
		}
		path := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(path, []byte(conf.String()), 0o644); err != nil {
			return err
		}
		n := newServer(bin, dir, false, nil)
		n.sentinelConf, n.port = path, ports[i]
		s.sentinels = append(s.sentinels, n)
	}
	for _, n := range s.sentinels {
		if err := n.launch(); err != nil {
			return fmt.Errorf("sentinel on %s: %w\n--- output (tail) ---\n%s", n.Addr(), err, n.Tail())
		}
	}
	return nil
}

// distinctPorts returns n different free loopback ports, released before it
// returns.
func distinctPorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close() // held until all are chosen, so they differ
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// ready returns nil once every sentinel monitors the master with both
// replicas in sync and both other sentinels known.
func (s *Sentinel) ready(ctx context.Context) error {
	for _, n := range s.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1, PoolSize: 1})
		m, err := sc.Master(ctx, MasterName).Result()
		var replicas []map[string]string
		if err == nil {
			replicas, err = sc.Replicas(ctx, MasterName).Result()
		}
		sc.Close()
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", n.Addr(), err)
		}
		if m["flags"] != "master" || m["num-slaves"] != strconv.Itoa(dataNodes-1) ||
			m["num-other-sentinels"] != strconv.Itoa(sentinelCount-1) {
			return fmt.Errorf("sentinel %s: master %v", n.Addr(), m)
		}
		for _, r := range replicas {
			if r["flags"] != "slave" || r["master-link-status"] != "ok" {
				return fmt.Errorf("sentinel %s: replica %v", n.Addr(), r)
			}
		}
	}
	return nil
}

func (s *Sentinel) failure(format string, args ...any) error {
	return fmt.Errorf("redistest: start sentinel: %s%s", fmt.Sprintf(format, args...), s.tails())
}

// tails returns the end of every process's output, for error messages.
func (s *Sentinel) tails() string {
	var b strings.Builder
	for i, n := range s.nodes {
		fmt.Fprintf(&b, "\n--- node %d %s output (tail) ---\n%s", i, n.Addr(), n.Tail())
	}
	for i, n := range s.sentinels {
		fmt.Fprintf(&b, "\n--- sentinel %d %s output (tail) ---\n%s", i, n.Addr(), n.Tail())
	}
	return b.String()
}

// Node returns data node i: 0 started as the master, 1 and 2 as replicas.
func (s *Sentinel) Node(i int) *Server { return s.nodes[i] }

// Nodes returns the number of data nodes, 3.
func (s *Sentinel) Nodes() int { return len(s.nodes) }

// Sentinel returns sentinel i, of 3.
func (s *Sentinel) Sentinel(i int) *Server { return s.sentinels[i] }

// SentinelAddrs returns the sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, n := range s.sentinels {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Options returns fresh go-redis failover options for MasterName with every
// sentinel as a seed and ContextTimeoutEnabled set. Callers may adjust them
// before redis.NewFailoverClient.
func (s *Sentinel) Options() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: MasterName, SentinelAddrs: s.SentinelAddrs(), ContextTimeoutEnabled: true}
}

// Client returns a new go-redis failover client built from Options: it
// asks the sentinels for the master and follows it across failovers. It is
// closed when the test finishes.
func (s *Sentinel) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(s.Options())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Master returns the index of the data node that every running sentinel
// reports as the master. It fails if they disagree, or if one cannot be
// asked.
func (s *Sentinel) Master(ctx context.Context) (int, error) {
	master := -1
	for _, n := range s.sentinels {
		if !n.Running() {
			continue
		}
		sc := redis.NewSentinelClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1, PoolSize: 1})
		addr, err := sc.GetMasterAddrByName(ctx, MasterName).Result()
		sc.Close()
		if err != nil {
			return -1, fmt.Errorf("redistest: sentinel %s: %w", n.Addr(), err)
		}
		i := s.nodeAt(addr)
		if i < 0 {
			return -1, fmt.Errorf("redistest: sentinel %s reports master %v, not a node of ours", n.Addr(), addr)
		}
		if master >= 0 && i != master {
			return -1, fmt.Errorf("redistest: sentinels disagree on the master: node %d or node %d", master, i)
		}
		master = i
	}
	if master < 0 {
		return -1, errors.New("redistest: no sentinel is running")
	}
	return master, nil
}

// nodeAt returns the index of the data node at addr, a [host, port] pair.
func (s *Sentinel) nodeAt(addr []string) int {
	if len(addr) != 2 || addr[0] != "127.0.0.1" {
		return -1
	}
	for i, n := range s.nodes {
		if strconv.Itoa(n.port) == addr[1] {
			return i
		}
	}
	return -1
}

// Failover makes the sentinels fail over with SENTINEL FAILOVER, which
// promotes a replica without asking the master (so writes acknowledged by
// the master but not yet replicated are lost, as in a real failover), and
// waits until every running sentinel reports the new master and it accepts
// writes. It returns the new master's index. The old master keeps running
// and accepting writes until the sentinels turn it into a replica, which
// takes them several more seconds; WaitReplicas waits for that. It fails if
// the sentinels do not agree on a master to start from, or the failover does
// not complete within ctx or 30 seconds.
func (s *Sentinel) Failover(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, failoverTimeout)
	defer cancel()
	old, err := s.Master(ctx)
	if err != nil {
		return -1, err
	}
	var sentinel *Server
	for _, n := range s.sentinels {
		if n.Running() {
			sentinel = n
			break
		}
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr(), MaxRetries: -1, PoolSize: 1})
	defer sc.Close()
	// INPROG: a failover is running; NOGOODSLAVE: no replica has reported
	// itself in sync recently. Both pass.
	err = poll(ctx, func(ctx context.Context) error {
		err := sc.Failover(ctx, MasterName).Err()
		if err != nil {
			return fmt.Errorf("sentinel failover on %s: %w", sentinel.Addr(), err)
		}
		return nil
	})
	if err != nil {
		return -1, fmt.Errorf("redistest: %w%s", err, s.tails())
	}
	return s.waitPromotion(ctx, old)
}

// KillMaster kills the current master outright (SIGKILL) and waits until
// every running sentinel reports a new master and it accepts writes: the
// down-after of 1 s, an election among the sentinels and the promotion, a few
// seconds in all (up to 4 s more right after another failover, which the
// sentinels make wait). It returns the indexes of the killed node and of the
// new master. Restart brings the killed node back; the sentinels make it a
// replica. It fails if the sentinels do not agree on the master to kill, or
// no replica takes over within ctx or 30 seconds.
func (s *Sentinel) KillMaster(ctx context.Context) (killed, promoted int, err error) {
	ctx, cancel := context.WithTimeout(ctx, failoverTimeout)
	defer cancel()
	killed, err = s.Master(ctx)
	if err != nil {
		return -1, -1, err
	}
	s.nodes[killed].Kill()
	promoted, err = s.waitPromotion(ctx, killed)
	return killed, promoted, err
}

// waitPromotion waits until the sentinels agree on a master other than old
// and that node is a master that accepts writes.
func (s *Sentinel) waitPromotion(ctx context.Context, old int) (int, error) {
	master := -1
	err := poll(ctx, func(ctx context.Context) error {
		m, err := s.Master(ctx)
		if err != nil {
			return err
		}
		if m == old {
			return fmt.Errorf("the sentinels still report node %d as master", old)
		}
		c := redis.NewClient(&redis.Options{Addr: s.nodes[m].Addr(), MaxRetries: -1, PoolSize: 1})
		defer c.Close()
		if err := c.Set(ctx, "redistest:failover-probe", time.Now().UnixNano(), time.Minute).Err(); err != nil {
			return fmt.Errorf("new master node %d: %w", m, err)
		}
		master = m
		return nil
	})
	if err != nil {
		return -1, fmt.Errorf("redistest: no failover from node %d: %w%s", old, err, s.tails())
	}
	return master, nil
}

// WaitReplicas waits until n replicas acknowledge a write on the current
// master, for example after a failover, until the sentinels have turned the
// old master into a replica. It fails if that does not happen within ctx or
// 30 seconds.
func (s *Sentinel) WaitReplicas(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, failoverTimeout)
	defer cancel()
	m, err := s.Master(ctx)
	if err != nil {
		return err
	}
	if err := waitAcks(ctx, s.nodes[m], n); err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	return nil
}
