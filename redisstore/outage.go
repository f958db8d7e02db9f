package redisstore

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

// A Redis that refuses connections is down, and every claim would wait for
// the client's own dial retries (go-redis: five dials per attempt and four
// attempts, about 1.7s) or, on an auto-pipeliner, for its whole deadline,
// to learn it. So the first refusal the store sees ends the claims in
// flight and makes every claim after it fail at once, with that refusal as
// its cause, while one probe in the background asks Redis every
// outageProbe until it answers again (or any call gets an answer). Only
// where the client reaches one server: on a cluster, one master's refusal
// says nothing about the others'.
//
// outage is the script.Health of the store's runner: told how every call
// ends, and cutting claims in flight short.
type outage struct {
	client redis.Scripter // for the probe
	logger *slog.Logger

	single atomic.Bool                   // the client reaches one server (env.go decides behind a pipeliner)
	cur    atomic.Pointer[refusal]       // while Redis refuses connections
	notify atomic.Pointer[chan struct{}] // closed when an outage begins, for the claims in flight
	asked  atomic.Int64                  // unix nanos of the last claim refused at once
	mu     sync.Mutex                    // orders beginnings and ends
}

// refusal is an outage: the first refused connection and when.
type refusal struct {
	err   error
	since time.Time
}

const (
	outageProbe     = 50 * time.Millisecond  // between probes
	outageProbeTime = 250 * time.Millisecond // a probe's deadline
	outageIdle      = 10 * time.Second       // no claim for this long: stop probing (the next claim finds out)
	outageMax       = 30 * time.Second       // probe this long at most; then a claim asks Redis again
)

func (o *outage) init(client redis.Scripter, logger *slog.Logger) {
	o.client, o.logger = client, logger
	notify := make(chan struct{})
	o.notify.Store(&notify)
	_, single := client.(*redis.Client)
	o.single.Store(single)
}

// refusedError is the error of a claim refused at once during an outage.
type refusedError struct{ r *refusal }

func (e *refusedError) Error() string {
	return fmt.Sprintf("Redis refuses connections (for %v; claims fail at once until it accepts one): %v",
		time.Since(e.r.since).Round(time.Millisecond), e.r.err)
}

func (e *refusedError) Unwrap() error { return e.r.err }

// isRefused reports whether err says Redis refused a connection.
func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// Refusal returns the error of a claim during an outage, nil otherwise.
func (o *outage) Refusal() error {
	r := o.cur.Load()
	if r == nil {
		return nil
	}
	o.asked.Store(time.Now().UnixNano())
	return &refusedError{r}
}

// Down returns a channel closed when an outage begins: a claim in flight
// stops waiting then.
func (o *outage) Down() <-chan struct{} { return *o.notify.Load() }

// Ended learns from how a call to Redis ended: an answer ends an outage, a
// refused connection begins one.
func (o *outage) Ended(err error) {
	switch {
	case err == nil || isReply(err):
		if o.cur.Load() != nil {
			o.end(nil)
		}
	case isRefused(err) && o.single.Load() && o.cur.Load() == nil:
		o.begin(err)
	}
}

// isReply reports whether err is an error reply from Redis: it was reached.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

func (o *outage) begin(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cur.Load() != nil {
		return
	}
	// Logged first: a claim that sees the outage may return before begin does.
	o.logger.Error("redisstore: Redis refuses connections: claims fail at once, without waiting for the client's retries, until it accepts one again", "err", err)
	r := &refusal{err: err, since: time.Now()}
	o.asked.Store(r.since.UnixNano())
	o.cur.Store(r)
	next := make(chan struct{})
	close(*o.notify.Swap(&next))
	go o.probe(r)
}

// end ends the outage r (any outage if nil), if it is still on.
func (o *outage) end(r *refusal) {
	o.mu.Lock()
	defer o.mu.Unlock()
	cur := o.cur.Load()
	if cur == nil || (r != nil && cur != r) {
		return
	}
	o.logger.Info("redisstore: Redis answers again", "after", time.Since(cur.since).Round(time.Millisecond))
	o.cur.Store(nil)
}

// probe asks Redis, every outageProbe, whether it accepts connections again,
// until it answers, or nobody has claimed for a while, or the outage has
// lasted outageMax: then claims ask Redis again, and the first refused one
// begins the next outage.
func (o *outage) probe(r *refusal) {
	t := time.NewTimer(outageProbe)
	defer t.Stop()
	for {
		<-t.C
		if o.cur.Load() != r {
			return // a call got an answer
		}
		if time.Since(r.since) > outageMax || time.Since(time.Unix(0, o.asked.Load())) > outageIdle {
			o.mu.Lock()
			o.cur.CompareAndSwap(r, nil) // given up, quietly: the next refusal says so again
			o.mu.Unlock()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), outageProbeTime)
		err := o.client.ScriptExists(ctx, claimScript.Hash()).Err()
		cancel()
		if err == nil || isReply(err) {
			o.end(r)
			return
		}
		t.Reset(outageProbe) // refused, or timed out within the client's retries: still down
	}
}
