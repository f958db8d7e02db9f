package check

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/redisstore/internal/script"
)

// Startup is the store's check of its Redis, first on its first claim and
// then again every minute while claims come: in the background, it reads
// every master's maxmemory-policy (Eviction) and persistence (AOF, RDB),
// and, behind an auto-pipeliner, whether the server runs in cluster mode.
// It logs each finding once (again when it changes); with
// RequireNoEviction or RequirePersistence, claims wait for the first
// verdict and are refused while Redis may evict, or does not persist, or
// could not be checked on every master (fail closed). Set the exported
// fields before the first Ready; it is safe for concurrent use.
type Startup struct {
	// Client is the store's client.
	Client redis.Scripter
	// RequireNoEviction and RequirePersistence make Ready wait for the
	// first verdict, and refuse claims while it finds Redis evicting, or
	// not persisting, or cannot check every master.
	RequireNoEviction, RequirePersistence bool
	// Logger receives the findings.
	Logger *slog.Logger
	// Evicting and NoPersistence are the errors a refused claim's error
	// wraps, with the finding: Redis may evict, or does not persist.
	Evicting, NoPersistence error
	// OneServer, if not nil, is called when the check finds that the
	// client reaches one server.
	OneServer func()
	// Now, if not nil, replaces the monotonic clock (for tests): the time
	// since some fixed point.
	Now func() time.Duration

	vanish  Vanish                  // the records found gone (Vanished)
	vonce   sync.Once               // readies vanish
	off     atomic.Bool             // Settle: no check, ever
	due     atomic.Int64            // when the next check is due (now()); 0: at once
	verdict atomic.Pointer[verdict] // the last check's; nil before the first ends
	mu      sync.Mutex
	running bool
	done    chan struct{}     // closed when the running check ends
	logged  map[string]string // by check: the finding last logged, not to repeat it
	runIDs  map[string]string // by master's address: its run_id at the last check
}

// verdict is what a check found, for the claims until the next one.
type verdict struct {
	refuse error // the refused claims' error; nil: claims pass
	all    bool  // the check reached every master
}

const (
	startupRetry   = time.Second      // a check that could not reach every master runs again on a claim this long after
	startupRecheck = 10 * time.Second // a refusing verdict is checked again this long after (perhaps fixed meanwhile)
	startupEvery   = time.Minute      // a good verdict is checked again this long after (a policy switched since)
	startupTime    = 5 * time.Second  // a check's deadline
)

// startupEpoch is what the check's times are measured from, on the
// monotonic clock.
var startupEpoch = time.Now()

func (s *Startup) now() time.Duration {
	if s.Now != nil {
		return s.Now()
	}
	return time.Since(startupEpoch)
}

// requires reports whether claims wait for, and obey, the verdict.
func (s *Startup) requires() bool { return s.RequireNoEviction || s.RequirePersistence }

// Ready is the check's part in a claim: it starts a check when one is due
// and, with a Require option, waits for a verdict (the first, or the next
// after a refusal) and returns its refusal.
func (s *Startup) Ready(ctx context.Context) error {
	if s.off.Load() {
		return nil
	}
	v := s.verdict.Load()
	if v != nil && s.now() < time.Duration(s.due.Load()) {
		if !s.requires() {
			return nil
		}
		return v.refuse
	}
	s.mu.Lock()
	if !s.running && s.now() >= time.Duration(s.due.Load()) {
		s.running, s.done = true, make(chan struct{})
		go s.run(s.done)
	}
	done, running := s.done, s.running
	s.mu.Unlock()
	if !s.requires() {
		return nil
	}
	if running && (v == nil || v.refuse != nil) {
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("redisstore: claim: waiting for the check of Redis's eviction policy and persistence: %w", context.Cause(ctx))
		}
	}
	if v = s.verdict.Load(); v != nil {
		return v.refuse
	}
	return nil
}

// Gone reports whether the record named key is gone (EXISTS), for op that
// found it not its owner's, since after that owner's last sign of life: if
// so, a Vanish on the Client and Logger (shared with the checks, and not
// stopped by Settle) logs it with its cause. A client that cannot be asked
// (not a redis.Cmdable), or a failed EXISTS, says no.
func (s *Startup) Gone(ctx context.Context, op, key string, since time.Duration) bool {
	c, ok := s.Client.(redis.Cmdable)
	if !ok {
		return false
	}
	if n, err := c.Exists(ctx, key).Result(); err != nil || n != 0 {
		return false
	}
	s.vonce.Do(func() {
		s.vanish.Client, s.vanish.Logger = s.Client, s.Logger
		s.vanish.Known = func() map[string]string {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.runIDs
		}
	})
	s.vanish.Report(op, since)
	return true
}

// VanishBusy reports whether the log of vanished records is at work (for
// tests).
func (s *Startup) VanishBusy() bool { return s.vanish.Busy() }

// Settle ends the checks for good, or before they start: Ready passes.
func (s *Startup) Settle() { s.off.Store(true) }

// Settled reports whether the checks have nothing to do until the next is
// due: the last one reached every master and none runs (or Settle).
func (s *Startup) Settled() bool {
	if s.off.Load() {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.verdict.Load()
	return !s.running && v != nil && v.all
}

// Due makes the next check due at once, rather than a while after the
// last one (for tests: the while has passed).
func (s *Startup) Due() { s.due.Store(0) }

// run checks Redis and records the verdict.
func (s *Startup) run(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), startupTime)
	defer cancel()
	t := Target{Client: s.Client}
	env := t.Environment(ctx)
	s.mu.Lock()
	defer func() {
		s.running = false
		close(done)
		s.mu.Unlock()
	}()
	if !env.Cluster && s.OneServer != nil {
		s.OneServer()
	}
	if len(env.RunIDs) > 0 {
		s.runIDs = env.RunIDs // a new map each check: Known's callers keep theirs
	}
	v := &verdict{all: env.All}
	ev, pe := env.Eviction, env.Persistence
	switch {
	case s.RequireNoEviction && ev.Status == Fail:
		v.refuse = fmt.Errorf("%w: %s", s.Evicting, ev.Message)
		ev.Message += "; claims are refused (Options.RequireNoEviction) until it is"
	case s.RequirePersistence && len(env.NoPersistence) > 0:
		v.refuse = fmt.Errorf("%w: %s", s.NoPersistence, pe.Message)
		pe.Message += "; claims are refused (Options.RequirePersistence) until it is"
	case s.requires() && !env.All:
		sentinel := s.Evicting
		if !s.RequireNoEviction {
			sentinel = s.NoPersistence
		}
		v.refuse = fmt.Errorf("%w: could not be checked on every master (%d of %d reached); claims are refused until a check reaches them all",
			sentinel, env.Reached, env.Masters)
	}
	s.log(Eviction, ev, s.RequireNoEviction)
	s.log(Persistence, pe, s.RequirePersistence)
	if old := s.verdict.Swap(v); old != nil && old.refuse != nil && v.refuse == nil && v.all {
		s.Logger.Info("redisstore: the check of Redis passes again: claims are served")
	}
	next := startupEvery
	switch {
	case v.refuse != nil:
		next = startupRecheck
	case !env.All:
		next = startupRetry // a master was not reached: the claims say so
	}
	s.due.Store(int64(s.now() + next))
}

// log logs r, a finding of the named check, unless it was the last logged:
// a failure (or a warning that refuses claims) as an error, a warning as a
// warning, and nothing when all is well (a finding that went away is
// logged again if it comes back).
func (s *Startup) log(name string, r Result, refuses bool) {
	if s.logged == nil {
		s.logged = map[string]string{}
	}
	if r.Status == OK || r.Message == "" {
		delete(s.logged, name)
		return
	}
	if s.logged[name] == r.Message {
		return
	}
	s.logged[name] = r.Message
	msg := "redisstore: " + name + ": " + r.Message
	if r.Status == Fail || (refuses && strings.Contains(r.Message, "claims are refused")) {
		s.Logger.Error(msg)
		return
	}
	s.Logger.Warn(msg)
}

// Env is what the start-up check found (Target.Environment).
type Env struct {
	// Eviction and Persistence are the results of those checks on the
	// masters reached (empty Results if none was).
	Eviction, Persistence Result
	// NoPersistence lists the masters reached that have neither AOF nor
	// RDB.
	NoPersistence []string
	// RunIDs are the run_ids of the masters reached, by address: a master
	// that restarted since has another.
	RunIDs map[string]string
	// Masters and Reached count the masters and those the check reached;
	// All is true when it reached them all.
	Masters, Reached int
	All              bool
	// Cluster is true when the client may reach several servers: a
	// cluster or a Ring, or, behind an auto-pipeliner (which hides
	// which), a server in cluster mode as INFO cluster says.
	Cluster bool
}

// Environment is the store's start-up check: it reads the eviction policy
// and persistence of every master t reaches (CONFIG GET maxmemory*, save
// and appendonly, or INFO memory and persistence where CONFIG is
// disabled), and its run_id (INFO server). It sends four or five commands
// per master.
func (t *Target) Environment(ctx context.Context) (env Env) {
	switch t.Client.(type) {
	case *redis.Client:
	default:
		env.Cluster = true // behind a pipeliner, until INFO says otherwise
	}
	if _, ok := t.Client.(redis.Cmdable); !ok {
		env.Eviction = Result{Eviction, Warn, fmt.Sprintf("cannot check maxmemory-policy through a %T (not a redis.Cmdable): make sure it is noeviction", t.Client)}
		env.Persistence = Result{Persistence, Warn, fmt.Sprintf("cannot check persistence through a %T (not a redis.Cmdable): make sure AOF is on", t.Client)}
		env.All = true
		return env
	}
	nodes, err := t.nodes(ctx)
	if err != nil {
		return env
	}
	env.Masters = len(nodes)
	_, pipelined := t.Client.(*redis.AutoPipeliner)
	reached := nodes[:0]
	env.RunIDs = map[string]string{}
	for _, n := range nodes {
		if !n.readEnvironment(ctx) {
			continue
		}
		if text, err := n.c.Info(ctx, "server").Result(); err == nil {
			env.RunIDs[n.addr] = parseInfo(text)["run_id"]
		}
		if pipelined {
			text, err := n.c.Info(ctx, "cluster").Result()
			env.Cluster = err != nil || parseInfo(text)["cluster_enabled"] != "0"
		}
		reached = append(reached, n)
	}
	env.Reached, env.All = len(reached), len(reached) == len(nodes)
	if len(reached) == 0 {
		return env
	}
	env.Eviction, env.Persistence, env.NoPersistence = eviction(reached), persistence(reached), noPersistence(reached)
	return env
}

// readEnvironment reads what the start-up check looks at into n, and
// reports whether n was reached (an error reply counts: CONFIG or an INFO
// section disabled).
func (n *node) readEnvironment(ctx context.Context) bool {
	n.info = map[string]string{}
	m, err := n.c.ConfigGet(ctx, "maxmemory*").Result()
	switch {
	case err == nil && m["maxmemory-policy"] != "":
		n.info["maxmemory_policy"], n.info["maxmemory"] = m["maxmemory-policy"], m["maxmemory"]
		save, err := n.c.ConfigGet(ctx, "save").Result()
		if err != nil && !script.IsReply(err) {
			return false
		}
		n.save = save["save"]
		aof, err := n.c.ConfigGet(ctx, "append*").Result()
		if err != nil && !script.IsReply(err) {
			return false
		}
		n.appendfs = aof["appendfsync"]
		if aof["appendonly"] == "yes" {
			n.info["aof_enabled"] = "1"
		}
		return true
	case err != nil && !script.IsReply(err):
		return false
	}
	// CONFIG is disabled (managed Redis): INFO may show what it would.
	n.configErr = err
	if n.configErr == nil {
		n.configErr = fmt.Errorf("CONFIG GET shows no maxmemory-policy")
	}
	for _, section := range []string{"memory", "persistence"} {
		text, err := n.c.Info(ctx, section).Result()
		if err != nil && !script.IsReply(err) {
			return false
		}
		for k, v := range parseInfo(text) {
			n.info[k] = v
		}
	}
	return true
}
