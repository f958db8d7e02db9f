package script

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Outage is the Health of a client that reaches one server: a Redis that
// refuses connections is down. Its client gets FastRefusal's hook, so the
// first call learns it in milliseconds rather than after go-redis's dial
// retries (about 1.7s) or, on an auto-pipeliner, its whole deadline. The
// first refusal Outage is told of ends the calls Run waits for on another
// goroutine (with a lost hook), and makes Refusal return an error at once,
// while one probe in the background asks Redis every outageProbe until it
// answers again (or any call gets an answer). Only where the client
// reaches one server: on a cluster, one master's refusal says nothing about
// the others'. It is safe for concurrent use.
type Outage struct {
	client redis.Scripter // for the probe
	probe  *Script        // the probe asks whether Redis has it
	logger *slog.Logger

	single atomic.Bool                   // the client reaches one server
	cur    atomic.Pointer[refusal]       // while Redis refuses connections
	notify atomic.Pointer[chan struct{}] // closed when an outage begins, for the calls in flight
	asked  atomic.Int64                  // the last call refused at once: nanoseconds since epoch
	mu     sync.Mutex                    // orders beginnings and ends
}

var _ Health = (*Outage)(nil)

// refusal is an outage: the first refused connection and when.
type refusal struct {
	err   error
	since time.Time
}

// epoch is what asked is measured from, on the monotonic clock.
var epoch = time.Now()

const (
	outageProbe     = 50 * time.Millisecond  // between probes
	outageProbeTime = 250 * time.Millisecond // a probe's deadline
	outageIdle      = 10 * time.Second       // no call refused for this long: stop probing (the next call finds out)
	outageMax       = 30 * time.Second       // probe this long at most; then a call asks Redis again
)

// NewOutage returns the Outage of client, which logs to logger when an
// outage begins and ends, and probes with SCRIPT EXISTS of probe's hash.
// It follows outages, and adds FastRefusal's hook to the client, when
// client is a *redis.Client, or once OneServer is called.
func NewOutage(client redis.Scripter, probe *Script, logger *slog.Logger) *Outage {
	o := &Outage{client: client, probe: probe, logger: logger}
	notify := make(chan struct{})
	o.notify.Store(&notify)
	if c, ok := client.(*redis.Client); ok {
		o.single.Store(true)
		FastRefusal(c)
	}
	return o
}

// OneServer says the client reaches one server (behind an auto-pipeliner,
// only a look at the server tells).
func (o *Outage) OneServer() {
	o.single.Store(true)
	if ap, ok := o.client.(*redis.AutoPipeliner); ok {
		FastRefusal(ap)
	}
}

// refusedError is the error of a call refused at once during an outage.
type refusedError struct{ r *refusal }

func (e *refusedError) Error() string {
	return fmt.Sprintf("Redis refuses connections (for %v; claims fail at once until it accepts one): %v",
		time.Since(e.r.since).Round(time.Millisecond), e.r.err)
}

func (e *refusedError) Unwrap() error { return e.r.err }

// isRefused reports whether err says Redis refused a connection.
func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// Refusal returns the error of a call during an outage, wrapping the
// refusal that began it; nil otherwise.
func (o *Outage) Refusal() error {
	r := o.cur.Load()
	if r == nil {
		return nil
	}
	o.asked.Store(int64(time.Since(epoch)))
	return &refusedError{r}
}

// Down returns a channel closed when an outage begins: a call in flight
// stops waiting then.
func (o *Outage) Down() <-chan struct{} { return *o.notify.Load() }

// Ended learns from how a call to Redis ended: an answer ends an outage, a
// refused connection begins one.
func (o *Outage) Ended(err error) {
	switch {
	case err == nil || IsReply(err):
		if o.cur.Load() != nil {
			o.end(nil)
		}
	case isRefused(err) && o.single.Load() && o.cur.Load() == nil:
		o.begin(err)
	}
}

// IsReply reports whether err is an error reply from Redis: it was reached.
func IsReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

func (o *Outage) begin(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cur.Load() != nil {
		return
	}
	// Logged first: a call that sees the outage may return before begin does.
	o.logger.Error("redisstore: Redis refuses connections: claims fail at once, without waiting for the client's retries, until it accepts one again", "err", err)
	r := &refusal{err: err, since: time.Now()}
	o.asked.Store(int64(r.since.Sub(epoch)))
	o.cur.Store(r)
	next := make(chan struct{})
	close(*o.notify.Swap(&next))
	go o.run(r)
}

// end ends the outage r (any outage if nil), if it is still on.
func (o *Outage) end(r *refusal) {
	o.mu.Lock()
	defer o.mu.Unlock()
	cur := o.cur.Load()
	if cur == nil || (r != nil && cur != r) {
		return
	}
	o.logger.Info("redisstore: Redis answers again", "after", time.Since(cur.since).Round(time.Millisecond))
	o.cur.Store(nil)
}

// run asks Redis, every outageProbe, whether it accepts connections again,
// until it answers, or nobody has called for a while, or the outage has
// lasted outageMax: then calls ask Redis again, and the first refused one
// begins the next outage.
func (o *Outage) run(r *refusal) {
	t := time.NewTimer(outageProbe)
	defer t.Stop()
	for {
		<-t.C
		if o.cur.Load() != r {
			return // a call got an answer
		}
		if time.Since(r.since) > outageMax || time.Since(epoch)-time.Duration(o.asked.Load()) > outageIdle {
			o.mu.Lock()
			o.cur.CompareAndSwap(r, nil) // given up, quietly: the next refusal says so again
			o.mu.Unlock()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), outageProbeTime)
		err := o.client.ScriptExists(ctx, o.probe.Hash()).Err()
		cancel()
		if err == nil || IsReply(err) {
			o.end(r)
			return
		}
		t.Reset(outageProbe) // refused, or timed out within the client's retries: still down
	}
}
