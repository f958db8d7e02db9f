package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	clusterSlots   = 16384
	clusterTimeout = 20 * time.Second // until every node agrees the cluster is ok
)

// Cluster is a private Redis Cluster of masters without replicas, one
// redis-server per master, all on 127.0.0.1.
type Cluster struct {
	nodes []*Server
}

// StartCluster starts a Redis Cluster of the given number of masters, splits
// the 16384 slots evenly between them, and waits until every node reports
// cluster_state:ok and the same full slot map. Options apply to every node;
// pass NoFullCoverage to let the surviving masters keep serving when one is
// down. The nodes are killed when the test finishes.
func StartCluster(t testing.TB, masters int, opts ...Option) *Cluster {
	t.Helper()
	bin := Binary(t) // skip before starting anything
	c := &Cluster{}
	t.Cleanup(c.Close)
	if err := c.start(bin, t.TempDir, masters, opts); err != nil {
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
	n := 0
	mkdir := func() string {
		d := filepath.Join(dir, fmt.Sprintf("node%d", n))
		n++
		_ = os.MkdirAll(d, 0o755)
		return d
	}
	c := &Cluster{}
	if err := c.start(bin, mkdir, masters, opts); err != nil {
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
	if masters < 1 || masters > clusterSlots {
		return fmt.Errorf("redistest: a cluster needs 1..%d masters, got %d", clusterSlots, masters)
	}
	for range masters {
		n := newServer(bin, mkdir(), true, opts)
		c.nodes = append(c.nodes, n)
		if err := n.startFresh(); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	clients := make([]*redis.Client, masters)
	for i, n := range c.nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1})
		defer clients[i].Close()
	}
	for i, cl := range clients {
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
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := c.check(ctx, clients)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return c.failure("cluster not ready within %v: %v", clusterTimeout, err)
		case <-tick.C:
		}
	}
}

// check returns nil once every node reports cluster_state:ok, knows all the
// nodes, and maps all slots to the expected masters.
func (c *Cluster) check(ctx context.Context, clients []*redis.Client) error {
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
			if len(r.Nodes) > 0 {
				masters[r.Nodes[0].Addr] = true
			}
		}
		if covered != clusterSlots || len(masters) != len(c.nodes) {
			return fmt.Errorf("%s: slot map covers %d slots on %d masters (%v)", addr, covered, len(masters), slots)
		}
	}
	return nil
}

func (c *Cluster) failure(format string, args ...any) error {
	var b strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "\n--- %s output (tail) ---\n%s", n.Addr(), n.Tail())
	}
	return fmt.Errorf("redistest: start cluster: %s%s", fmt.Sprintf(format, args...), b.String())
}

// Addrs returns the addresses of all nodes, in node order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Masters returns the number of masters (and nodes) in the cluster.
func (c *Cluster) Masters() int { return len(c.nodes) }

// Node returns the i-th node, for example to Kill or Pause a master.
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
