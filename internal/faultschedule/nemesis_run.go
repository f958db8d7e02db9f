package faultschedule

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/internal/faultproxy"
)

// nemesis applies a schedule and logs each fault with its time.
type nemesis struct {
	c *cluster

	mu     sync.Mutex
	events []string
	lines  []faultLine
	healed time.Time
	start  time.Time
}

// faultLine is one line of the faults file: what the nemesis did, when
// (nanoseconds from the storm's start, the history's clock).
type faultLine struct {
	AtNS  int64  `json:"at_ns"`
	Event string `json:"event"`
}

func (n *nemesis) logf(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	at := time.Since(n.start)
	msg := fmt.Sprintf(format, args...)
	n.events = append(n.events, fmt.Sprintf("%8v ", at.Round(time.Millisecond))+msg)
	n.lines = append(n.lines, faultLine{AtNS: int64(at), Event: msg})
}

// write writes the faults file: JSON Lines, one per fault applied or
// healed, with its time.
func (n *nemesis) write(path string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var b []byte
	for _, l := range n.lines {
		line, err := json.Marshal(l)
		if err != nil {
			return err
		}
		b = append(append(b, line...), '\n')
	}
	return os.WriteFile(path, b, 0o644)
}

func (n *nemesis) log() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.events...)
}

func (n *nemesis) healedAt() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.healed.IsZero() {
		return n.start
	}
	return n.healed
}

func (n *nemesis) heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.healed = time.Now()
}

// wait sleeps until d after the start, or until ctx is done.
func (n *nemesis) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(time.Until(n.start.Add(d)))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (n *nemesis) run(ctx context.Context, start time.Time, s Schedule) {
	n.mu.Lock()
	n.start = start
	n.mu.Unlock()
	for _, f := range s {
		if !n.wait(ctx, f.At) {
			return
		}
		n.apply(ctx, f)
		n.heal()
	}
}

// busyWithin bounds how long a pause or a kill waits for a slow run to
// catch: slow runs come every tenth operation, so it takes a fraction of
// a second at the schedules' rates.
const busyWithin = 2 * time.Second

// busy waits (a bounded poll) until the instance (in this process) has a
// slow run in its sleep, so that a kill or a pause catches a run before
// its effect.
func busy(ctx context.Context, in *instance, within time.Duration) {
	deadline := time.Now().Add(within)
	for in.svc.sleeping.Load() == 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(2 * time.Millisecond)
	}
}

func (n *nemesis) apply(ctx context.Context, f Fault) {
	c := n.c
	in := c.inst(f.Instance)
	healAt := time.Now().Add(f.For)
	sleepUntil := func() {
		t := time.NewTimer(time.Until(healAt))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	switch f.Kind {
	case Partition:
		n.logf("partition %s from Redis", in.name)
		r := in.inject(faultproxy.Fault{Action: faultproxy.Blackhole})
		sleepUntil()
		in.heal(r)
		n.logf("healed: %s reconnected", in.name)
	case Delay:
		n.logf("delay %s's commands by 50ms", in.name)
		r := in.inject(faultproxy.Fault{Action: faultproxy.Delay, Delay: 50 * time.Millisecond})
		sleepUntil()
		in.heal(r)
		n.logf("healed: %s's commands undelayed", in.name)
	case DropReply:
		n.logf("drop the replies of %s's next 5 scripts after they ran", in.name)
		r := in.inject(faultproxy.Fault{Action: faultproxy.LoseReply, Match: faultproxy.Name("EVALSHA", "EVAL"), Times: 5})
		sleepUntil()
		if r != nil {
			n.logf("healed: %d replies dropped", r.Hits())
		}
		in.heal(r)
	case Pause:
		if in.child != nil {
			n.logf("SIGSTOP %s", in.name)
			in.child.stop()
			sleepUntil()
			in.child.cont()
			n.logf("healed: SIGCONT %s", in.name)
			return
		}
		busy(ctx, in, busyWithin)
		n.logf("pause %s (%d handlers running, %d before their effect)", in.name, in.svc.inFlight.Load(), in.svc.sleeping.Load())
		in.svc.gate.freeze()
		in.svc.settle(5 * time.Second)
		r := in.inject(faultproxy.Fault{Action: faultproxy.Blackhole})
		if r != nil {
			in.proxy.ResetConns()
		}
		sleepUntil()
		in.heal(r)
		in.svc.gate.thaw()
		n.logf("healed: %s continued", in.name)
	case Kill:
		if in.child != nil {
			n.logf("kill -9 %s", in.name)
			in.child.kill()
		} else {
			busy(ctx, in, busyWithin)
			n.logf("kill %s (%d handlers running, %d before their effect)", in.name, in.svc.inFlight.Load(), in.svc.sleeping.Load())
			in.svc.gate.freeze()
			in.svc.settle(5 * time.Second)
			in.svc.gate.kill()
			if in.inject(faultproxy.Fault{Action: faultproxy.Blackhole}) != nil {
				in.proxy.ResetConns()
			} else {
				_ = in.rdb.Close()
			}
			in.srv.Listener.Close()
			in.srv.CloseClientConnections()
		}
		sleepUntil()
		c.mu.Lock()
		c.restarts++
		name := in.name + "r" + strconv.Itoa(c.restarts)
		c.mu.Unlock()
		fresh := c.start(name)
		c.mu.Lock()
		c.old = append(c.old, in)
		c.insts[f.Instance%len(c.insts)] = fresh
		c.mu.Unlock()
		n.logf("healed: %s started in %s's place", name, in.name)
	case Failover:
		if c.sentinel == nil {
			n.logf("failover: no Sentinel")
			return
		}
		n.logf("kill -9 the master; the sentinels promote a replica")
		killed, promoted, err := c.sentinel.KillMaster(ctx)
		n.logf("node %d promoted in node %d's place (%v)", promoted, killed, err)
		if killed >= 0 {
			c.sentinel.Node(killed).Restart(c.t)
			err := c.sentinel.WaitReplicas(ctx, 1)
			n.logf("healed: node %d restarted as a replica (%v)", killed, err)
		}
	case RestartRedis:
		if c.redis == nil {
			n.logf("restart-redis: no single server")
			return
		}
		n.logf("kill -9 redis-server")
		c.redis.Kill()
		sleepUntil()
		c.redis.Restart(c.t)
		n.logf("healed: redis-server restarted")
	case Evict:
		n.logf("fill Redis past its maxmemory")
		if c.redis == nil {
			n.logf("evict: no single server")
			return
		}
		rdb := redis.NewClient(&redis.Options{Addr: c.redis.Addr()})
		defer rdb.Close()
		filler := make([]byte, 64<<10)
		for i := range 256 { // 16 MiB
			if err := rdb.Set(ctx, "filler:"+strconv.Itoa(i), filler, 0).Err(); err != nil {
				n.logf("filler: %v", err)
				break
			}
		}
		sleepUntil()
		n.logf("healed: filler written")
	}
}
