package faultschedule

import (
	"context"
	"fmt"
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
	healed time.Time
	start  time.Time
}

func (n *nemesis) logf(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.events = append(n.events, fmt.Sprintf("%8v ", time.Since(n.start).Round(time.Millisecond))+fmt.Sprintf(format, args...))
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

// busy waits (a bounded poll) until the instance has a handler running,
// so that a kill or a pause catches one mid-run.
func busy(ctx context.Context, in *instance, within time.Duration) {
	deadline := time.Now().Add(within)
	for in.svc.inFlight.Load() == 0 && time.Now().Before(deadline) && ctx.Err() == nil {
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
		n.logf("partition %s from Redis", in.svc.name)
		r := in.proxy.Inject(faultproxy.Fault{Action: faultproxy.Blackhole})
		sleepUntil()
		r.Remove()
		in.proxy.ResetConns()
		n.logf("healed: %s reconnected", in.svc.name)
	case Delay:
		n.logf("delay %s's commands by 50ms", in.svc.name)
		r := in.proxy.Inject(faultproxy.Fault{Action: faultproxy.Delay, Delay: 50 * time.Millisecond})
		sleepUntil()
		r.Remove()
		n.logf("healed: %s's commands undelayed", in.svc.name)
	case DropReply:
		n.logf("drop the replies of %s's next 5 scripts after they ran", in.svc.name)
		r := in.proxy.Inject(faultproxy.Fault{Action: faultproxy.LoseReply, Match: faultproxy.Name("EVALSHA", "EVAL"), Times: 5})
		sleepUntil()
		n.logf("healed: %d replies dropped", r.Hits())
		r.Remove()
	case Pause:
		busy(ctx, in, time.Second)
		n.logf("pause %s (%d handlers running)", in.svc.name, in.svc.inFlight.Load())
		in.svc.gate.freeze()
		in.svc.settle(5 * time.Second)
		r := in.proxy.Inject(faultproxy.Fault{Action: faultproxy.Blackhole})
		in.proxy.ResetConns()
		sleepUntil()
		r.Remove()
		in.svc.gate.thaw()
		n.logf("healed: %s continued", in.svc.name)
	case Kill:
		busy(ctx, in, time.Second)
		n.logf("kill %s (%d handlers running)", in.svc.name, in.svc.inFlight.Load())
		in.svc.gate.freeze()
		in.svc.settle(5 * time.Second)
		in.svc.gate.kill()
		in.proxy.Inject(faultproxy.Fault{Action: faultproxy.Blackhole})
		in.proxy.ResetConns()
		in.srv.Listener.Close()
		in.srv.CloseClientConnections()
		sleepUntil()
		c.mu.Lock()
		c.restarts++
		name := in.svc.name + "r" + strconv.Itoa(c.restarts)
		c.mu.Unlock()
		fresh := c.start(f.Instance, name)
		c.mu.Lock()
		c.old = append(c.old, in)
		c.insts[f.Instance%len(c.insts)] = fresh
		c.mu.Unlock()
		n.logf("healed: %s started in %s's place", name, in.svc.name)
	case RestartRedis:
		n.logf("kill -9 redis-server")
		c.redis.Kill()
		sleepUntil()
		c.redis.Restart(c.t)
		n.logf("healed: redis-server restarted")
	case Evict:
		n.logf("fill Redis past its maxmemory")
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
