package faultschedule

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The faults a schedule applies.
const (
	// Partition cuts one instance off Redis (every command swallowed, the
	// connections left open) for the fault's duration.
	Partition Kind = "partition"
	// Delay adds 50ms to every command of one instance.
	Delay Kind = "delay"
	// DropReply lets Redis run one instance's next script calls and drops
	// their replies.
	DropReply Kind = "drop-reply"
	// Pause stops one instance (SIGSTOP, emulated: its handlers and Redis
	// connections freeze, new requests wait) for longer than the lease,
	// then continues it.
	Pause Kind = "pause"
	// Kill kills one instance mid-handler (kill -9, emulated: its
	// handlers never go on, its connections are cut) and starts a new one
	// in its place after the fault's duration.
	Kill Kind = "kill"
	// RestartRedis kills redis-server with SIGKILL and restarts it, with
	// whatever its persistence kept.
	RestartRedis Kind = "restart-redis"
	// Failover kills the Sentinel deployment's master (SIGKILL): the
	// sentinels promote a replica, which has what asynchronous
	// replication had sent it.
	Failover Kind = "failover"
	// Evict writes more than Redis's maxmemory of filler, so that an
	// allkeys-lru Redis evicts records.
	Evict Kind = "evict"
)

// Kinds lists every kind of fault.
var Kinds = []Kind{Partition, Delay, DropReply, Pause, Kill, RestartRedis, Failover, Evict}

// Fault is one fault of a schedule.
type Fault struct {
	// Kind is what it does.
	Kind Kind
	// At is when it starts, from the storm's start.
	At time.Duration
	// For is how long it lasts before it is healed (the instance
	// restarted, continued, reconnected).
	For time.Duration
	// Instance is the instance it hits (for the faults that hit one).
	Instance int
}

func (f Fault) String() string {
	return fmt.Sprintf("%v %s instance %d for %v", f.At.Round(time.Millisecond), f.Kind, f.Instance, f.For.Round(time.Millisecond))
}

// Schedule is a list of faults, in the order of their start.
type Schedule []Fault

func (s Schedule) String() string {
	parts := make([]string, len(s))
	for i, f := range s {
		parts[i] = f.String()
	}
	return strings.Join(parts, "; ")
}

// Heals returns when the last fault is healed, from the storm's start.
func (s Schedule) Heals() time.Duration {
	var end time.Duration
	for _, f := range s {
		end = max(end, f.At+f.For)
	}
	return end
}

// Random returns a schedule drawn from seed: n faults of the given kinds
// (all of Kinds when none), one at a time, within window, each lasting
// between one and two leases (a pause: at least two), on one of instances.
// The same arguments give the same schedule.
func Random(seed uint64, n int, kinds []Kind, window, lease time.Duration, instances int) Schedule {
	if len(kinds) == 0 {
		kinds = Kinds
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	slot := window / time.Duration(max(n, 1))
	var s Schedule
	for i := range n {
		k := kinds[rng.IntN(len(kinds))]
		d := lease + time.Duration(rng.Int64N(int64(lease)))
		if k == Pause {
			d += lease
		}
		at := time.Duration(i)*slot + time.Duration(rng.Int64N(int64(max(slot-d, 1))))
		s = append(s, Fault{Kind: k, At: at, For: d, Instance: rng.IntN(instances)})
	}
	return s
}
