package check

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/internal/keyslot"
)

func (t *Target) cluster(ctx context.Context, nodes []node) Result {
	enabled := nodes[0].info["cluster_enabled"] == "1"
	switch c := t.Client.(type) {
	case *redis.ClusterClient:
		info, err := c.ClusterInfo(ctx).Result()
		if err != nil {
			return Result{Cluster, Fail, fmt.Sprintf("CLUSTER INFO failed: %v", err)}
		}
		f := parseInfo(info)
		msg := fmt.Sprintf("cluster of %d masters (%s nodes known), state %s, %s of 16384 slots ok",
			len(nodes), f["cluster_known_nodes"], f["cluster_state"], f["cluster_slots_ok"])
		if f["cluster_state"] != "ok" {
			return Result{Cluster, Fail, msg + ": claims on the slots not served fail"}
		}
		return Result{Cluster, OK, msg}
	case *redis.Ring:
		return Result{Cluster, Warn, fmt.Sprintf("a Ring of %d shards: while a shard is down its keys go to the others, "+
			"which lack its records, so retries run again; prefer Redis Cluster", len(nodes))}
	case *redis.AutoPipeliner:
		if enabled {
			return pipelinedCluster(ctx, c)
		}
		return Result{Cluster, Warn, "not a cluster, as far as an auto-pipeliner shows: it hides its client, so " +
			"Check cannot tell a Ring (whose shards lack each other's records when one is down) from a single node; " +
			"the other checks saw one server only"}
	}
	if enabled {
		return Result{Cluster, Fail, "the server runs in cluster mode, but the store's client is not a cluster client: " +
			"claims of keys on other masters fail (MOVED); use redis.NewClusterClient"}
	}
	return Result{Cluster, OK, "not a cluster"}
}

// checkPipelinedCluster checks a cluster reached through an auto-pipeliner,
// which hides its client: Check cannot tell a cluster client's from a
// single-node client's, and sees one node through it. So it asks every
// master, through the pipeliner, about a key in one of its slots: a
// pipeliner that routes by slot gets every answer, one on a single-node
// client gets MOVED.
func pipelinedCluster(ctx context.Context, ap *redis.AutoPipeliner) Result {
	info, err := ap.ClusterInfo(ctx).Result()
	if err != nil {
		return Result{Cluster, Fail, fmt.Sprintf("CLUSTER INFO failed: %v", err)}
	}
	if f := parseInfo(info); f["cluster_state"] != "ok" {
		return Result{Cluster, Fail, fmt.Sprintf("cluster state %s, %s of 16384 slots ok: claims on the slots not served fail",
			f["cluster_state"], f["cluster_slots_ok"])}
	}
	shards, err := ap.ClusterShards(ctx).Result()
	if err != nil {
		return Result{Cluster, Fail, fmt.Sprintf("CLUSTER SHARDS failed: %v", err)}
	}
	masters, skipped := 0, 0
	for _, sh := range shards {
		i := slices.IndexFunc(sh.Nodes, func(n redis.Node) bool { return n.Role == "master" })
		if i < 0 || len(sh.Slots) == 0 {
			skipped++
			continue
		}
		masters++
		key, ok := keyIn(sh.Slots)
		if !ok {
			continue
		}
		if err := ap.Exists(ctx, key).Err(); err != nil {
			if _, moved := redis.IsMovedError(err); moved {
				return Result{Cluster, Fail, "the server runs in cluster mode, but the store's auto-pipeliner is not a " +
					"cluster client's: claims of keys on other masters fail (MOVED); use redis.NewClusterClient(...).AutoPipeline()"}
			}
			n := sh.Nodes[i]
			return Result{Cluster, Fail, fmt.Sprintf("EXISTS on master %s failed: %v",
				net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)), err)}
		}
	}
	msg := fmt.Sprintf("cluster of %d masters, reached through an auto-pipeliner, which routes by slot", masters)
	if skipped > 0 {
		msg += fmt.Sprintf(" (%d shards without a master or slots)", skipped)
	}
	return Result{Cluster, Warn, msg + "; the other checks, in-progress records included, saw one master only: " +
		"to check them all, run Check on a store on the cluster client"}
}

// keyIn returns a key whose hash slot is in one of ranges, if one of the
// first million candidates is (for a range of one slot, all but surely).
func keyIn(ranges []redis.SlotRange) (string, bool) {
	for i := range 1 << 20 {
		key := "idemkey-check-" + strconv.Itoa(i)
		slot := int64(keyslot.Of(key))
		for _, r := range ranges {
			if slot >= r.Start && slot <= r.End {
				return key, true
			}
		}
	}
	return "", false
}
