package bench

import (
	"context"
	"fmt"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/ginmw"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

// Contender names. Every contender serves the same handler (app.handle);
// they differ in what stands in front of it.
const (
	// Bare is the handler with no idempotency.
	Bare = "bare"
	// Floor is the least a Redis-backed idempotency layer can do: two raw
	// EVALSHA of one-command scripts (SET NX GET PX to claim, SET PX to
	// complete), no fencing, no fingerprinting in Go.
	Floor = "floor"
	// Limit is the handler plus exactly our two raw EVALSHA: claim.lua and
	// complete.lua, with none of our Go-side work.
	Limit = "limit"
	// LimitPipelined is Limit with its EVALSHA sent through go-redis's
	// auto-pipeliner.
	LimitPipelined = "limit-pipelined"
	// Ours is the handler behind ginmw with a store on a plain *redis.Client.
	Ours = "ours"
	// OursPipelined is Ours with the store on the client's auto-pipeliner
	// (rdb.AutoPipeline()).
	OursPipelined = "ours-pipelined"
)

// kind says what stands in front of a contender's handler.
type kind int

const (
	kindBare  kind = iota // nothing
	kindFloor             // floor.go
	kindLimit             // limit.go
	kindOurs              // ginmw and redisstore
)

// spec describes one contender. A variant of ours is one more entry with
// kind kindOurs and its own store or middleware options: it gets the first,
// replay, storm, scale-out and cost phases and its ratios against the floor
// and the limits without further code.
type spec struct {
	name string
	kind kind
	// pipelined sends the contender's Redis calls through the auto-pipeliner
	// of its *redis.Client (or *redis.ClusterClient).
	pipelined bool
	// store and middleware adjust a kindOurs contender's options; nil keeps
	// the defaults.
	store      func(*redisstore.Options)
	middleware func(*ginmw.Options)
}

// contenders are every contender, in the first round's order.
var contenders = []spec{
	{name: Bare, kind: kindBare},
	{name: Floor, kind: kindFloor},
	{name: Limit, kind: kindLimit},
	{name: LimitPipelined, kind: kindLimit, pipelined: true},
	{name: Ours, kind: kindOurs},
	{name: OursPipelined, kind: kindOurs, pipelined: true},
	// Ours runs with the defaults: in-process collapse on. This is ours as
	// it was before collapse, the configuration the earlier results measured.
	{name: OursNoCollapse, kind: kindOurs, store: func(o *redisstore.Options) { o.NoCollapse = true }},
	// The best configuration for replays: collapse, and a replay cache.
	{name: OursCached, kind: kindOurs, store: func(o *redisstore.Options) { o.ReplayCacheBytes = 64 << 20 }},
}

// The variants of ours.
const (
	OursNoCollapse = "ours-nocollapse"
	OursCached     = "ours-cached"
)

// ContenderNames lists every contender's name, in the first round's order.
func ContenderNames() []string {
	names := make([]string, len(contenders))
	for i, s := range contenders {
		names[i] = s.name
	}
	return names
}

func specOf(name string) (spec, bool) {
	for _, s := range contenders {
		if s.name == name {
			return s, true
		}
	}
	return spec{}, false
}

// isOurs reports whether name is ours or a variant of it.
func isOurs(name string) bool {
	s, ok := specOf(name)
	return ok && s.kind == kindOurs
}

// scripter returns what the contender sends its Redis calls through: client
// itself, or its auto-pipeliner. The auto-pipeliner is one shared instance
// per client, closed with it.
func (s spec) scripter(client redis.UniversalClient) (redis.Scripter, error) {
	if !s.pipelined {
		return client, nil
	}
	ap, err := redistest.AutoPipeline(client)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.name, err)
	}
	return ap, nil
}

// newStore returns a kindOurs contender's store on client.
func (s spec) newStore(client redis.UniversalClient) (*redisstore.Store, error) {
	sc, err := s.scripter(client)
	if err != nil {
		return nil, err
	}
	var opts redisstore.Options
	if s.store != nil {
		s.store(&opts)
	}
	return redisstore.New(sc, opts)
}

// mwOptions returns a kindOurs contender's middleware options.
func (s spec) mwOptions() ginmw.Options {
	// The load generators send no credential: one scope for all.
	opts := ginmw.Options{Scope: ginmw.SharedScope(limitScope)}
	if s.middleware != nil {
		s.middleware(&opts)
	}
	return opts
}

// handler builds the contender's Gin engine on a, with client (nil for
// bare) as its Redis. It returns ours' store too (nil for the others).
func (s spec) handler(ctx context.Context, a *app, client *redis.Client) (http.Handler, *redisstore.Store, error) {
	switch s.kind {
	case kindBare:
		return bareEngine(a), nil, nil
	case kindFloor, kindLimit:
		sc, err := s.scripter(client)
		if err != nil {
			return nil, nil, err
		}
		if s.kind == kindFloor {
			f, err := newFloor(ctx, a, client, sc)
			if err != nil {
				return nil, nil, err
			}
			return f.engine(), nil, nil
		}
		l, err := newLimit(ctx, a, client, sc)
		if err != nil {
			return nil, nil, err
		}
		return l.engine(), nil, nil
	}
	store, err := s.newStore(client)
	if err != nil {
		return nil, nil, err
	}
	return oursEngine(a, store, s.mwOptions()), store, nil
}
