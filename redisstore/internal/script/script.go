// Package script runs one of idemkey's Lua scripts on Redis: EVALSHA with
// the EVAL fallback, bounded by the call's deadline, with WAIT for replicas
// on the same connection (following MOVED, ASK and TRYAGAIN on a cluster),
// timed for the observer, and with a hook for a call whose answer was lost.
// Persist repeats a write until it reaches Redis; Outage, a Health, makes
// calls fail at once while a single server refuses connections.
//
// It knows nothing of package redisstore: it takes plain values and
// callbacks and returns Redis's replies and errors as they are, and
// redisstore reads them.
package script

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/observe"
)

// Script is one Lua script of the store.
type Script struct {
	*redis.Script
	// Name names it for the observer: "claim", "complete", ...
	Name string
	// Source is its Lua source, for EVAL on a node that lacks it.
	Source string
	// Waits marks a write a failover must not lose: it runs with WAIT when
	// the Runner has Replicas.
	Waits bool

	sha, src any // Hash() and Source, boxed once for the argument list
}

// New returns the script of src.
func New(name, src string, waits bool) *Script {
	sc := &Script{Script: redis.NewScript(src), Name: name, Source: src, Waits: waits}
	sc.sha, sc.src = sc.Hash(), src
	return sc
}

// Lost is told when Redis may have run a call whose answer did not reach
// the caller (see Runner.Run). An interface rather than a func, so that a
// caller hands over a pointer it has, where a method value would cost an
// allocation per call.
type Lost interface{ Lost() }

// LostFunc is a func as a Lost.
type LostFunc func()

// Lost calls f.
func (f LostFunc) Lost() { f() }

// Bytes is an argument of bytes that costs nothing to put in a call's
// arguments: a *Bytes goes into an interface as it is, where a []byte is
// copied to the heap first. go-redis sends it as a bulk string
// (encoding.BinaryMarshaler).
type Bytes []byte

// MarshalBinary returns b's bytes, as they are.
func (b *Bytes) MarshalBinary() ([]byte, error) { return *b, nil }

// String returns b's bytes, for go-redis's printing of commands.
func (b *Bytes) String() string { return string(*b) }

// The command names, boxed once.
var (
	evalshaArg any = "evalsha"
	evalArg    any = "eval"
)

// Config configures a Runner.
type Config struct {
	// Client runs the scripts.
	Client redis.Scripter
	// Replicas is how many replicas must acknowledge each script that
	// Waits (WAIT); 0 for none. It needs a *redis.Client or a
	// *redis.ClusterClient.
	Replicas int
	// ReplicaTimeout bounds each WAIT, in whole milliseconds.
	ReplicaTimeout time.Duration
	// NotReplicated makes the error for a write that fewer replicas than
	// Replicas acknowledged; it must not be nil when Replicas is set.
	NotReplicated func(acked, want int) error
	// Observer, if not nil, is told of every call.
	Observer observe.Observer
	// Health, if not nil, is told how every call ends, and may cut short
	// the wait for a call that may be handed back.
	Health Health
}

// Health follows whether Redis can be reached (Outage: a Redis that
// refuses connections).
type Health interface {
	// Ended is told the error every call ended with (nil: answered), also
	// a call Run stopped waiting for, when it ends.
	Ended(err error)
	// Down returns a channel closed when Redis is found unreachable: a call
	// with a lost hook that Run waits for on another goroutine stops
	// waiting then, and Run returns Refusal's error.
	Down() <-chan struct{}
	// Refusal returns why Redis cannot be reached now, or nil.
	Refusal() error
}

// Runner runs scripts. It is safe for concurrent use.
type Runner struct {
	c       Config
	bounded bool // the client ends calls at their context's deadline
	// direct runs commands built here, without go-redis's Script and
	// cmdable (which copy the arguments into a slice of their own, box the
	// hash and the keys anew each call, and need a []any of the caller's):
	// the client itself when it is a *redis.Client or *redis.ClusterClient,
	// else nil. Hooks see the same EVALSHA either way.
	direct processor
}

// processor is a client that runs a command it is given.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// NewRunner returns a Runner for c, or an error if c.Replicas is set on a
// client that cannot send WAIT on the connection that ran the script.
func NewRunner(c Config) (*Runner, error) {
	if c.Replicas > 0 {
		switch c.Client.(type) {
		case *redis.Client, *redis.ClusterClient:
		default:
			return nil, fmt.Errorf("redisstore: Replicas needs a *redis.Client or *redis.ClusterClient, not %T", c.Client)
		}
	}
	r := &Runner{c: c, bounded: honoursDeadlines(c.Client)}
	switch c.Client.(type) {
	case *redis.Client, *redis.ClusterClient:
		r.direct = c.Client.(processor)
	}
	return r, nil
}

// honoursDeadlines reports whether client ends a call at its context's
// deadline by itself.
func honoursDeadlines(client redis.Scripter) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// Run runs sc on keys with args, and returns Redis's reply and error. It
// returns by ctx's end: a client that does not end calls at their deadline
// runs them on another goroutine, which Run stops waiting for when ctx ends
// (returning context.Cause(ctx)). When sc Waits and the Runner has
// Replicas, a reply comes with an error if WAIT failed, or with the
// NotReplicated error if too few replicas acknowledged it.
//
// lost, if not nil, is told when Redis may have run sc but its answer did
// not reach the caller: at once, before Run returns, when the call failed
// without a final reply from Redis (see IsFinal); or, for a call Run stopped
// waiting for, from another goroutine once the call ends other than with a
// final error reply. It is not called when the script's reply came back
// (with a WAIT error or not): the caller decides then. Such a call also
// stops being waited for when Config.Health finds Redis down; Run then
// returns its Refusal.
//
// Run keeps no slice of args once it returns (it copies it where a call
// may outlive it, or goes to go-redis's API), so a caller may build args on
// its stack; keys it may keep.
func (r *Runner) Run(ctx context.Context, sc *Script, keys []string, lost Lost, args ...any) (any, error) {
	if r.c.Observer == nil {
		return r.bound(ctx, sc, keys, lost, args)
	}
	start := time.Now()
	reply, err := r.bound(ctx, sc, keys, lost, args)
	r.c.Observer.Redis(ctx, &observe.Call{Script: sc.Name, Start: start, Duration: time.Since(start), Err: err})
	return reply, err
}

// bound is Run without the observer.
func (r *Runner) bound(ctx context.Context, sc *Script, keys []string, lost Lost, args []any) (any, error) {
	h := r.c.Health
	if r.bounded {
		var (
			reply any
			err   error
		)
		if r.direct != nil && (r.c.Replicas == 0 || !sc.Waits) {
			reply, err = r.evalDirect(ctx, sc, keys, args) // keeps no slice of args
		} else {
			reply, err = r.eval(ctx, sc, keys, slices.Clone(args))
		}
		if h != nil {
			h.Ended(err)
		}
		if err != nil && reply == nil && lost != nil && !IsFinal(err) {
			lost.Lost()
		}
		return reply, err
	}
	// The call may outlive Run: it gets a copy of args (keys are the
	// caller's to keep as they are).
	cargs := slices.Clone(args)
	type result struct {
		reply any
		err   error
	}
	done := make(chan result, 1)
	go func() {
		reply, err := r.eval(ctx, sc, keys, cargs)
		if h != nil {
			h.Ended(err)
		}
		done <- result{reply, err}
	}()
	var down <-chan struct{}
	if h != nil && lost != nil {
		down = h.Down()
	}
wait:
	for {
		select {
		case res := <-done:
			if res.err != nil && res.reply == nil && lost != nil && !IsFinal(res.err) {
				lost.Lost()
			}
			return res.reply, res.err
		case <-ctx.Done():
			break wait
		case <-down:
			if h.Refusal() != nil {
				break wait
			}
			down = nil // over already: wait on
		}
	}
	select {
	case res := <-done:
		return res.reply, res.err
	default:
	}
	if lost != nil {
		go func() {
			if res := <-done; res.err == nil || !IsFinal(res.err) {
				lost.Lost()
			}
		}()
	}
	if h != nil {
		if err := h.Refusal(); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %w", context.Cause(ctx), err)
			}
			return nil, err
		}
	}
	return nil, context.Cause(ctx)
}

// eval runs sc on keys, with WAIT when sc Waits and the Runner has Replicas.
// args is its own (a copy of the caller's): go-redis's API may keep it.
func (r *Runner) eval(ctx context.Context, sc *Script, keys []string, args []any) (any, error) {
	if r.c.Replicas == 0 || !sc.Waits {
		if r.direct != nil {
			return r.evalDirect(ctx, sc, keys, args)
		}
		return sc.Run(ctx, r.c.Client, keys, args...).Result()
	}
	switch c := r.c.Client.(type) {
	case *redis.ClusterClient:
		return r.evalCluster(ctx, c, sc, keys, args)
	case *redis.Client:
		return r.evalWait(ctx, c, false, sc, keys, args)
	}
	return nil, fmt.Errorf("redisstore: Replicas needs a *redis.Client or *redis.ClusterClient, not %T", r.c.Client)
}

// evalDirect runs sc as go-redis's Script.Run does, EVALSHA and EVAL if
// Redis lacks the script, with commands built here: one slice for the
// whole argument list.
func (r *Runner) evalDirect(ctx context.Context, sc *Script, keys []string, args []any) (any, error) {
	cmd := command(ctx, evalshaArg, sc.sha, keys, args)
	if err := r.direct.Process(ctx, cmd); err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
		cmd = command(ctx, evalArg, sc.src, keys, args)
		_ = r.direct.Process(ctx, cmd)
	}
	return cmd.Result()
}

// command returns the command name script numkeys keys... args..., with
// the keys' position set for a cluster's routing.
func command(ctx context.Context, name, script any, keys []string, args []any) *redis.Cmd {
	a := make([]any, 3+len(keys)+len(args))
	a[0], a[1], a[2] = name, script, len(keys)
	for i, k := range keys {
		a[3+i] = k
	}
	copy(a[3+len(keys):], args)
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// IsFinal reports whether err is a final error reply from Redis
// (WRONGTYPE, a script error): Redis was reached and trying again cannot
// help. Replies that say "not now" (loading after a restart, cluster down,
// failing over, a slot moved or migrating) are not final, nor are
// failures to reach Redis in time.
func IsFinal(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	for _, p := range [...]string{"LOADING", "CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK", "MASTERDOWN", "READONLY", "BUSY"} {
		if redis.HasErrorPrefix(err, p) {
			return false
		}
	}
	return true
}
