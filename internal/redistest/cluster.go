package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	clusterSlots   = 16384
	clusterTimeout = 20 * time.Second // until every node agrees the cluster is ok
	// failoverTimeout bounds Failover and KillMaster, of clusters and
	// sentinels alike, when the caller's context allows longer.
	failoverTimeout = 30 * time.Second
	// manualFailoverRetry is how long a CLUSTER FAILOVER gets before it is
	// sent again; Redis gives up on a manual failover after 5 s.
	manualFailoverRetry = 6 * time.Second
)

// Cluster is a private Redis Cluster, one redis-server per node, all on
// 127.0.0.1: masters only, or masters with replicas (see Replicas).
//
// Node indexes are fixed at start: nodes 0 to Masters()-1 start as the
// masters, and the replicas of master i are the nodes
// Masters()+i*r to Masters()+i*r+r-1, with r replicas per master. Failover and
// KillMaster change who is master, not the indexes. The methods are safe for
// concurrent use, but failovers should not overlap.
type Cluster struct {
	nodes   []*Server
	ids     []string // node IDs, by index; they survive Restart (nodes.conf)
	masters int
}

// StartCluster starts a Redis Cluster of the given number of masters, splits
// the 16384 slots evenly between them, and waits until every node reports
// cluster_state:ok and the same full slot map. Options apply to every node;
// pass Replicas(n) to give each master n replicas (the wait then includes
// their sync), NoFullCoverage to let the surviving masters keep serving when
// one is down, and Args("--cluster-node-timeout", "1000") to detect a dead
// master faster than the default of 2000 ms. The nodes are killed when the
// test finishes.
func StartCluster(t testing.TB, masters int, opts ...Option) *Cluster {
	t.Helper()
	bin := Binary(t) // skip before starting anything
	// The directory first, then Close: cleanups run last registered
	// first, so the nodes are dead before their files are removed (the
	// other way round, a node still writing made RemoveAll fail: "directory
	// not empty", on a loaded machine).
	dir := t.TempDir()
	c := &Cluster{}
	t.Cleanup(c.Close)
	if err := c.start(bin, dirMaker(dir), masters, opts); err != nil {
		t.Fatal(err)
	}
	return c
}

// LaunchCluster is StartCluster for programs outside tests: node i keeps its
// files in dir/node<i>, and the caller must Close the cluster. It fails if
// redis-server is not on PATH.
func LaunchCluster(dir string, masters int, opts ...Option) (*Cluster, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	c := &Cluster{}
	if err := c.start(bin, dirMaker(dir), masters, opts); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close kills every node.
func (c *Cluster) Close() {
	for _, n := range c.nodes {
		n.Kill()
	}
}

func (c *Cluster) start(bin string, mkdir func() string, masters int, opts []Option) error {
	replicas := configure(opts).replicas
	if masters < 1 || masters > clusterSlots || replicas < 0 {
		return fmt.Errorf("redistest: a cluster needs 1..%d masters and no negative replicas, got %d and %d",
			clusterSlots, masters, replicas)
	}
	c.masters = masters
	// Sync replicas (and demoted masters) at once, not after the default 5 s
	// diskless-sync delay; callers' options come after, so they can override.
	opts = append([]Option{Args("--repl-diskless-sync-delay", "0")}, opts...)
	for range masters * (1 + replicas) {
		n := newServer(bin, mkdir(), true, opts)
		c.nodes = append(c.nodes, n)
		if err := n.startFresh(); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	clients := make([]*redis.Client, len(c.nodes))
	for i, n := range c.nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1})
		defer clients[i].Close()
		id, err := clients[i].ClusterMyID(ctx).Result()
		if err != nil {
			return c.failure("cluster myid on %s: %v", n.Addr(), err)
		}
		c.ids = append(c.ids, id)
	}
	for i, cl := range clients[:masters] {
		lo, hi := i*clusterSlots/masters, (i+1)*clusterSlots/masters-1
		// Distinct epochs avoid a config-epoch collision round, as redis-cli does.
		if err := cl.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return c.failure("set config epoch on %s: %v", c.nodes[i].Addr(), err)
		}
		if err := cl.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return c.failure("add slots %d-%d on %s: %v", lo, hi, c.nodes[i].Addr(), err)
		}
	}
	for _, n := range c.nodes[1:] {
		if err := clients[0].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.port, n.busPort).Err(); err != nil {
			return c.failure("cluster meet %s: %v", n.Addr(), err)
		}
	}
	for i := masters; i < len(c.nodes); i++ {
		master := (i - masters) / replicas
		// A replica can only follow a master it has heard of through gossip.
		err := poll(ctx, func(ctx context.Context) error {
			return clients[i].ClusterReplicate(ctx, c.ids[master]).Err()
		})
		if err != nil {
			return c.failure("make %s a replica of %s: %v", c.nodes[i].Addr(), c.nodes[master].Addr(), err)
		}
	}
	// A write also makes the replicas' replication offsets non-zero, and
	// CLUSTER SLOTS lists no replica whose offset is still zero; without
	// one, that takes the master's first replication ping, 10 s.
	for _, n := range c.nodes[:masters] {
		if err := waitAcks(ctx, n, replicas); err != nil {
			return c.failure("%v", err)
		}
	}
	if err := poll(ctx, func(ctx context.Context) error { return c.check(ctx, clients, replicas) }); err != nil {
		return c.failure("cluster not ready within %v: %v", clusterTimeout, err)
	}
	return nil
}

// check returns nil once every node reports cluster_state:ok, knows all the
// nodes, and maps all slots to the expected masters, each with its replicas.
func (c *Cluster) check(ctx context.Context, clients []*redis.Client, replicas int) error {
	want := fmt.Sprintf("cluster_state:ok\r\ncluster_slots_assigned:%d\r\ncluster_slots_ok:%[1]d\r\n", clusterSlots)
	known := fmt.Sprintf("cluster_known_nodes:%d\r\n", len(c.nodes))
	for i, cl := range clients {
		addr := c.nodes[i].Addr()
		info, err := cl.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: cluster info: %v", addr, err)
		}
		if !strings.Contains(info, want) || !strings.Contains(info, known) {
			return fmt.Errorf("%s: not ready:\n%s", addr, info)
		}
		//lint:ignore SA1019 the cluster client routes by CLUSTER SLOTS, so that is the view to check
		slots, err := cl.ClusterSlots(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: cluster slots: %v", addr, err)
		}
		covered, masters := 0, map[string]bool{}
		for _, r := range slots {
			covered += r.End - r.Start + 1
			if len(r.Nodes) != 1+replicas {
				return fmt.Errorf("%s: slots %d-%d served by %d nodes, want %d", addr, r.Start, r.End, len(r.Nodes), 1+replicas)
			}
			masters[r.Nodes[0].Addr] = true
		}
		if covered != clusterSlots || len(masters) != c.masters {
			return fmt.Errorf("%s: slot map covers %d slots on %d masters (%v)", addr, covered, len(masters), slots)
		}
	}
	return nil
}

func (c *Cluster) failure(format string, args ...any) error {
	return fmt.Errorf("redistest: start cluster: %s%s", fmt.Sprintf(format, args...), c.tails())
}

// tails returns the end of every node's output, for error messages.
func (c *Cluster) tails() string {
	var b strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "\n--- %s output (tail) ---\n%s", n.Addr(), n.Tail())
	}
	return b.String()
}

// Addrs returns the addresses of all nodes, in node order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Masters returns the number of masters the cluster started with, which
// are nodes 0 to Masters()-1.
func (c *Cluster) Masters() int { return c.masters }

// Nodes returns the number of nodes, masters and replicas.
func (c *Cluster) Nodes() int { return len(c.nodes) }

// Node returns the i-th node, for example to Kill or Pause it.
func (c *Cluster) Node(i int) *Server { return c.nodes[i] }

// Options returns fresh go-redis cluster options with every node as a seed and
// ContextTimeoutEnabled set. Callers may adjust them before
// redis.NewClusterClient.
func (c *Cluster) Options() *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true}
}

// Client returns a new go-redis cluster client built from Options. It is
// closed when the test finishes.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(c.Options())
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, masterID   string
	port           int
	master, failed bool
	slots          []string // as listed: "0-5460", "7000"; open migrations excluded
}

// view returns the cluster as node i sees it, by node ID.
func (c *Cluster) view(ctx context.Context, i int) (map[string]clusterNode, error) {
	cl := redis.NewClient(&redis.Options{Addr: c.nodes[i].Addr(), MaxRetries: -1, PoolSize: 1})
	defer cl.Close()
	out, err := cl.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("%s: cluster nodes: %w", c.nodes[i].Addr(), err)
	}
	nodes := map[string]clusterNode{}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		_, port, _ := strings.Cut(addr, ":")
		n := clusterNode{id: f[0], masterID: f[3]}
		n.port, _ = strconv.Atoi(port)
		for flag := range strings.SplitSeq(f[2], ",") {
			switch flag {
			case "master":
				n.master = true
			case "fail", "fail?":
				n.failed = true
			}
		}
		for _, s := range f[8:] {
			if !strings.HasPrefix(s, "[") {
				n.slots = append(n.slots, s)
			}
		}
		nodes[n.id] = n
	}
	return nodes, nil
}

// index returns the index of the node with the given ID, or -1.
func (c *Cluster) index(id string) int { return slices.Index(c.ids, id) }

// running returns the first running node, whose view the lookups use.
func (c *Cluster) running() (int, error) {
	for i, n := range c.nodes {
		if n.Running() {
			return i, nil
		}
	}
	return -1, errors.New("redistest: no cluster node is running")
}

// ReplicasOf returns the indexes of the nodes that replicate node master now,
// as node master sees it, failed ones excluded.
func (c *Cluster) ReplicasOf(ctx context.Context, master int) ([]int, error) {
	v, err := c.view(ctx, master)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	var out []int
	for _, n := range v {
		if n.masterID == c.ids[master] && !n.failed {
			if i := c.index(n.id); i >= 0 {
				out = append(out, i)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// MasterFor returns the index of the node that is master for key's slot
// now, as the first running node sees it.
func (c *Cluster) MasterFor(ctx context.Context, key string) (int, error) {
	i, err := c.running()
	if err != nil {
		return -1, err
	}
	cl := redis.NewClient(&redis.Options{Addr: c.nodes[i].Addr(), MaxRetries: -1, PoolSize: 1})
	defer cl.Close()
	slot, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return -1, fmt.Errorf("redistest: cluster keyslot: %w", err)
	}
	v, err := c.view(ctx, i)
	if err != nil {
		return -1, fmt.Errorf("redistest: %w", err)
	}
	for _, n := range v {
		if n.master && !n.failed && hasSlot(n.slots, int(slot)) {
			return c.index(n.id), nil
		}
	}
	return -1, fmt.Errorf("redistest: no master serves slot %d of %q", slot, key)
}

func hasSlot(ranges []string, slot int) bool {
	for _, r := range ranges {
		lo, hi, ok := strings.Cut(r, "-")
		if !ok {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 == nil && err2 == nil && a <= slot && slot <= b {
			return true
		}
	}
	return false
}

// Failover promotes a replica of node master with CLUSTER FAILOVER (a
// coordinated, lossless failover: the master stops writes until the replica
// has caught up) and waits until the replica is master of all of the old
// master's slots in the view of every running node, every running node
// reports cluster_state:ok, and the old master follows the new one with its
// replication link up. It returns the new master's index. It fails if node
// master is not a running master or has no replica, or if the failover does
// not complete within ctx or 30 seconds.
func (c *Cluster) Failover(ctx context.Context, master int) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, failoverTimeout)
	defer cancel()
	slots, replicas, err := c.masterAndReplicas(ctx, master)
	if err != nil {
		return -1, err
	}
	r := replicas[0]
	cl := redis.NewClient(&redis.Options{Addr: c.nodes[r].Addr(), MaxRetries: -1, PoolSize: 1})
	defer cl.Close()
	var sent time.Time
	err = poll(ctx, func(ctx context.Context) error {
		if time.Since(sent) > manualFailoverRetry {
			if err := cl.ClusterFailover(ctx).Err(); err != nil {
				return fmt.Errorf("cluster failover on %s: %w", c.nodes[r].Addr(), err)
			}
			sent = time.Now()
		}
		if err := c.settled(ctx, r, slots); err != nil {
			return err
		}
		return c.following(ctx, master, r)
	})
	if err != nil {
		return -1, fmt.Errorf("redistest: fail over node %d to node %d: %w%s", master, r, err, c.tails())
	}
	return r, nil
}

// KillMaster kills node master outright (SIGKILL), then waits until one of
// its replicas is master of all of its slots in the view of every running
// node and every running node reports cluster_state:ok. That takes the
// cluster node timeout, a few gossip rounds and an election: a few seconds.
// It returns the new master's index. It fails if node master is not a
// running master or has no replica, or if no replica takes over within ctx
// or 30 seconds. Restart brings the old master back; it rejoins as a
// replica.
func (c *Cluster) KillMaster(ctx context.Context, master int) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, failoverTimeout)
	defer cancel()
	slots, replicas, err := c.masterAndReplicas(ctx, master)
	if err != nil {
		return -1, err
	}
	c.nodes[master].Kill()
	promoted := -1
	err = poll(ctx, func(ctx context.Context) error {
		var last error
		for _, r := range replicas {
			if last = c.settled(ctx, r, slots); last == nil {
				promoted = r
				return nil
			}
		}
		return last
	})
	if err != nil {
		return -1, fmt.Errorf("redistest: kill master node %d: no replica took over: %w%s", master, err, c.tails())
	}
	return promoted, nil
}

// WaitOK waits until every running node reports cluster_state:ok and a
// master for every slot, for example after Restart of a killed node. It
// fails if that does not happen within ctx or 30 seconds.
func (c *Cluster) WaitOK(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, failoverTimeout)
	defer cancel()
	err := poll(ctx, func(ctx context.Context) error { return c.settled(ctx, -1, nil) })
	if err != nil {
		return fmt.Errorf("redistest: cluster not ok: %w%s", err, c.tails())
	}
	return nil
}

// masterAndReplicas checks that node master is a running master and returns
// its slots and running replicas, in the master's own view.
func (c *Cluster) masterAndReplicas(ctx context.Context, master int) ([]string, []int, error) {
	if master < 0 || master >= len(c.nodes) || !c.nodes[master].Running() {
		return nil, nil, fmt.Errorf("redistest: node %d is not a running node", master)
	}
	v, err := c.view(ctx, master)
	if err != nil {
		return nil, nil, fmt.Errorf("redistest: %w", err)
	}
	me := v[c.ids[master]]
	if !me.master {
		return nil, nil, fmt.Errorf("redistest: node %d is not a master", master)
	}
	var replicas []int
	for _, n := range v {
		if i := c.index(n.id); n.masterID == me.id && !n.failed && i >= 0 && c.nodes[i].Running() {
			replicas = append(replicas, i)
		}
	}
	if len(replicas) == 0 {
		return nil, nil, fmt.Errorf("redistest: master node %d has no running replica", master)
	}
	slices.Sort(replicas)
	return me.slots, replicas, nil
}

// settled returns nil once every running node reports cluster_state:ok and,
// unless master is -1, sees node master as a master serving slots.
func (c *Cluster) settled(ctx context.Context, master int, slots []string) error {
	for i, n := range c.nodes {
		if !n.Running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1, PoolSize: 1})
		info, err := cl.ClusterInfo(ctx).Result()
		cl.Close()
		if err != nil {
			return fmt.Errorf("%s: cluster info: %w", n.Addr(), err)
		}
		if !strings.Contains(info, "cluster_state:ok\r\n") {
			return fmt.Errorf("%s: cluster state not ok", n.Addr())
		}
		if master < 0 {
			continue
		}
		v, err := c.view(ctx, i)
		if err != nil {
			return err
		}
		if m := v[c.ids[master]]; !m.master || m.failed || !slices.Equal(m.slots, slots) {
			return fmt.Errorf("%s does not see node %d as master of slots %v yet", n.Addr(), master, slots)
		}
	}
	return nil
}

// following returns nil once node old, if running, replicates node master
// with its link up, and every running node knows it.
func (c *Cluster) following(ctx context.Context, old, master int) error {
	if !c.nodes[old].Running() {
		return nil
	}
	cl := redis.NewClient(&redis.Options{Addr: c.nodes[old].Addr(), MaxRetries: -1, PoolSize: 1})
	defer cl.Close()
	info, err := cl.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("%s: info replication: %w", c.nodes[old].Addr(), err)
	}
	if !strings.Contains(info, fmt.Sprintf("master_port:%d\r\n", c.nodes[master].port)) ||
		!strings.Contains(info, "master_link_status:up\r\n") {
		return fmt.Errorf("%s does not follow %s yet", c.nodes[old].Addr(), c.nodes[master].Addr())
	}
	for i, n := range c.nodes {
		if !n.Running() {
			continue
		}
		v, err := c.view(ctx, i)
		if err != nil {
			return err
		}
		if v[c.ids[old]].masterID != c.ids[master] {
			return fmt.Errorf("%s does not see node %d as a replica of node %d yet", n.Addr(), old, master)
		}
	}
	return nil
}
