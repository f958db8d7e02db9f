package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/lua"
	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/redisstore/internal/check"
	"github.com/idemkey/idemkey/redisstore/internal/lru"
	"github.com/idemkey/idemkey/redisstore/internal/record"
	"github.com/idemkey/idemkey/redisstore/internal/script"
	"github.com/idemkey/idemkey/redisstore/internal/timers"
	"github.com/idemkey/idemkey/redisstore/internal/wake"
)

// The scripts; those that wait for replicas (Options.Replicas) are the
// writes a failover must not lose.
var (
	claimScript      = script.New("claim", lua.Claim, true)
	legacyScript     = script.New("legacy", lua.Legacy, true)
	completeScript   = script.New("complete", lua.Complete, true)
	releaseScript    = script.New("release", lua.Release, false)
	extendScript     = script.New("extend", lua.Extend, false)
	checkpointScript = script.New("checkpoint", lua.Checkpoint, true)
	lookupScript     = script.New("lookup", lua.Lookup, false)
	watchScript      = script.New("watch", lua.Watch, false)
)

// MaxFieldLen is the longest Request.Key, Scope, Fingerprint or Label the
// store accepts, in bytes.
const MaxFieldLen = 1024

// SpecVersion is the version of the record format this package writes and
// reads, as docs/spec.md specifies it: major.minor, where a reader of one
// major version reads every minor one (it ignores what a minor version
// adds) and refuses a record of a major version it does not know.
// [github.com/idemkey/idemkey/redisstore/spec] reads records by its names.
const SpecVersion = "1.0"

// Options configures a Store. The zero value gives the defaults.
type Options struct {
	// Prefix starts every Redis key the store writes. It must not contain
	// '{' or '}', which would change the keys' cluster hash tag.
	// Default: "idem:".
	Prefix string

	// Retention is how long a record lives after the last sign of life of
	// its owner (claim, heartbeat, checkpoint): for a completed record, from
	// at most one heartbeat before its completion. Clients must retry within
	// it; a retry after it runs the operation again (see TombstoneRetention).
	// Request.Retention overrides it per request (the middleware's
	// Retention option per route). Must exceed Lease and MaxDuration.
	// Default: 24h.
	Retention time.Duration

	// TombstoneRetention keeps, for this long after Retention, a tombstone of
	// each completed record: its fingerprint, status code and attempt count,
	// packed in one small integer key. A retry that comes after the outcome
	// expired but within the tombstone gets *ExpiredError (the HTTP
	// middleware answers the original status with a response-expired
	// problem) instead of running the operation again; another fingerprint
	// gets ErrMismatch. A tombstone is a second key written by the same
	// completion, so it costs memory for the whole of Retention too, and one
	// more command per first execution. Default: 0 (no tombstones).
	TombstoneRetention time.Duration

	// Lease is how long a claim holds a key without a sign of life. An owner
	// that stops extending it (crashed, partitioned) is taken over this long
	// after its last claim, extend or checkpoint. Default: 10s.
	Lease time.Duration

	// Heartbeat is the interval at which [Lease.Supervise] and [Store.Do]
	// extend a running owner's lease. Each beat waits at most a third of it
	// for Redis, and a failed beat is tried again after a fifth of it, so one
	// slow or lost beat does not use up the lease. Must be shorter than
	// Lease. Default: Lease/3.
	Heartbeat time.Duration

	// Replicas makes every claim, checkpoint and completion wait until this
	// many replicas acknowledge it (WAIT, sent in the same round trip on the
	// same connection), so that a failover to an acknowledging replica
	// cannot lose it: a claim no replica saw would let a retry on the new
	// master run the operation a second time. A claim acknowledged by too
	// few is released and fails with ErrNotReplicated before anything runs.
	// WAIT n is met by any n replicas, and a failover promotes one
	// particular replica: count every replica a failover may promote (with
	// Sentinel, all of them; docs/failover.md has the figures). Replication
	// stays asynchronous: WAIT narrows the window, it does not close it.
	// Needs a *redis.Client or *redis.ClusterClient (not the
	// auto-pipeliner). Default: 0 (no waiting).
	Replicas int

	// ReplicaTimeout bounds each wait for replicas; it is rounded up to whole
	// milliseconds (WAIT with 0 would wait for ever). Default: 100ms.
	ReplicaTimeout time.Duration

	// NoCollapse turns off the in-process collapse of duplicates: by
	// default, concurrent claims of one key and fingerprint in one process
	// share one claim in Redis, and while this process runs the key's
	// operation its duplicates are answered without asking Redis (they get
	// the same in-progress answer Redis would give, or, with Await, the
	// outcome as soon as it is stored). Redis remains the referee between
	// processes. Default: false (collapse).
	NoCollapse bool

	// ReplayCacheBytes, when positive, keeps up to this many bytes of
	// completed outcomes in this process, so that replays of them cost no
	// round trip: outcomes this process stored, and replays it fetched. An
	// entry lives no longer than its record in Redis (the retention); when
	// the cache is full, the least recently replayed entry goes first. It
	// costs memory, and a replay served from it does not see a record that
	// was deleted from Redis by hand. The cache keeps its own copy of each
	// outcome, so the caller may reuse the buffers it gave to Complete or
	// returned from Do's function; a replay's Response.Body from Claim is
	// the cache's copy, to read and not to modify. Default: 0 (no cache).
	ReplayCacheBytes int

	// Observer, if set, receives every decision the store, Store.Do and the
	// HTTP middleware on this store make, and every Redis call (package
	// observe). It is called synchronously: keep it fast. The store calls
	// it through observe.Safe, so its panics never reach a request, and
	// Options returns it so wrapped. Default: nil.
	Observer observe.Observer

	// MaxDuration bounds how long an operation may run: past it, the
	// context given to [Store.Do]'s function (or supervised by
	// [Lease.Supervise]) is cancelled with cause ErrMaxDuration and the
	// heartbeat stops, nor do Extend and Checkpoint push the lease out, so
	// a stuck operation cannot hold its key for ever. Zero means no bound.
	// Must be shorter than Retention. Default: 0.
	MaxDuration time.Duration

	// RequireNoEviction makes the store refuse to serve on a Redis that may
	// evict records (fail closed): claims fail with an error matching
	// ErrEvicting (the HTTP middleware answers 503, FailOpen or not) while
	// any master's maxmemory-policy is not noeviction and a maxmemory is
	// set, or the check has not reached every master. Without it, the store
	// only logs that finding. Either way the store checks on its first
	// claim, in the background, and a minute after each check on a claim:
	// CONFIG GET, or INFO where CONFIG is disabled, on every master
	// (through an auto-pipeliner, the one server it shows); where neither
	// tells, it warns and serves. With it, the first claims wait for that
	// check, and a refusing Redis is checked again every 10s, so that
	// fixing it needs no restart. Default: false (log only).
	RequireNoEviction bool

	// RequirePersistence is RequireNoEviction for persistence: claims fail
	// with an error matching ErrNoPersistence (HTTP 503) while a master has
	// neither AOF nor RDB snapshots (a restart forgets every record, and
	// retries run again), or the check has not reached every master.
	// Without it, the store logs a warning. Where CONFIG is disabled and
	// AOF is off, it warns and serves. Default: false (log only).
	RequirePersistence bool

	// NoStartupCheck turns those checks (and their logs) off, for an
	// embedded miniredis in a test or a demo, which neither evicts nor
	// persists; never for a real Redis. New refuses it with a Require
	// option. Default: false (check).
	NoStartupCheck bool

	// Logger receives what the store finds wrong with its Redis, outside
	// any one call: eviction, no persistence, refused connections, records
	// that vanished under their owners. Default: slog.Default().
	Logger *slog.Logger
}

// Store claims, completes and replays idempotency records in Redis. It is
// safe for concurrent use; create one per Redis deployment and share it.
type Store struct {
	client redis.Scripter
	opts   Options // defaults filled in: the one place of every option
	runner *script.Runner

	// The retentions in the scripts' forms: the store's, Request.Retention's.
	ret  *retention
	rets retentions

	flights flights
	beats   *timers.Queue[*timers.Watch] // every supervised lease's next beat or MaxDuration
	cache   *lru.Replays                 // nil without Options.ReplayCacheBytes
	wake    *wake.Waker                  // nil when the client cannot subscribe
	env     *check.Startup               // the checks of eviction and persistence, and the log of vanished records
	out     *script.Outage               // a Redis that refuses connections
}

// New returns a Store that runs its scripts on client: a *redis.Client,
// *redis.ClusterClient, *redis.Ring, a failover client or any other
// redis.Scripter. It returns an error if opts is invalid; it does not contact
// Redis.
//
// Every call the store makes ends by its context's deadline. A
// *redis.Client or *redis.ClusterClient built with ContextTimeoutEnabled
// does that itself; for any other client the store waits for the reply on
// another goroutine and gives up on time (a claim whose reply comes after
// that is handed back).
//
// On a *redis.Client (or an auto-pipeliner over one server), New adds a
// dial hook, once per client: a refused connection fails a command at once
// (errors.Is syscall.ECONNREFUSED; not a *net.OpError), for the client's
// other users too, instead of after go-redis's dial retries.
//
// To spare allocations, script arguments are strings, *string and
// encoding.BinaryMarshaler values: go-redis sends them and prints them in
// hooks (cmd.String) as strings; another Scripter must handle them too.
func New(client redis.Scripter, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	if opts.Prefix == "" {
		opts.Prefix = "idem:"
	}
	if opts.Lease == 0 {
		opts.Lease = 10 * time.Second
	}
	if opts.Retention == 0 {
		opts.Retention = 24 * time.Hour
	}
	if opts.Heartbeat == 0 {
		opts.Heartbeat = opts.Lease / 3
	}
	if opts.ReplicaTimeout == 0 {
		opts.ReplicaTimeout = 100 * time.Millisecond
	}
	opts.ReplicaTimeout = (opts.ReplicaTimeout + time.Millisecond - 1).Truncate(time.Millisecond)
	switch {
	case strings.ContainsAny(opts.Prefix, "{}"):
		return nil, fmt.Errorf("redisstore: prefix %q contains '{' or '}'", opts.Prefix)
	case opts.Lease < time.Millisecond:
		return nil, fmt.Errorf("redisstore: lease %v is under 1ms", opts.Lease)
	case opts.Retention <= opts.Lease:
		return nil, fmt.Errorf("redisstore: retention %v does not exceed lease %v", opts.Retention, opts.Lease)
	case opts.Heartbeat <= 0 || opts.Heartbeat >= opts.Lease:
		return nil, fmt.Errorf("redisstore: heartbeat %v is not between 0 and lease %v", opts.Heartbeat, opts.Lease)
	case opts.MaxDuration < 0:
		return nil, fmt.Errorf("redisstore: negative max duration %v", opts.MaxDuration)
	case opts.MaxDuration > 0 && opts.Retention <= opts.MaxDuration:
		return nil, fmt.Errorf("redisstore: retention %v does not exceed max duration %v", opts.Retention, opts.MaxDuration)
	case opts.TombstoneRetention < 0:
		return nil, fmt.Errorf("redisstore: negative tombstone retention %v", opts.TombstoneRetention)
	case opts.NoStartupCheck && (opts.RequireNoEviction || opts.RequirePersistence):
		return nil, errors.New("redisstore: NoStartupCheck with RequireNoEviction or RequirePersistence: nothing would check what they require")
	case opts.Replicas < 0 || opts.ReplicaTimeout < 0:
		return nil, fmt.Errorf("redisstore: negative replicas %d or replica timeout %v", opts.Replicas, opts.ReplicaTimeout)
	}
	opts.Observer = observe.Safe(opts.Observer) // an observer's panic never reaches a request
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Store{client: client, opts: opts, beats: timers.New((*timers.Watch).Fire)}
	s.ret = s.newRetention(opts.Retention)
	s.out = script.NewOutage(client, claimScript, opts.Logger)
	s.env = &check.Startup{Client: client, RequireNoEviction: opts.RequireNoEviction, RequirePersistence: opts.RequirePersistence,
		Logger: opts.Logger, Evicting: ErrEvicting, NoPersistence: ErrNoPersistence, OneServer: s.out.OneServer}
	if opts.NoStartupCheck {
		s.env.Settle()
	}
	run, err := script.NewRunner(script.Config{Client: client, Replicas: opts.Replicas, ReplicaTimeout: opts.ReplicaTimeout,
		NotReplicated: notReplicated, Observer: opts.Observer, Health: s.out})
	if err != nil {
		return nil, err
	}
	s.runner = run
	if opts.ReplayCacheBytes < 0 {
		return nil, fmt.Errorf("redisstore: negative replay cache size %d", opts.ReplayCacheBytes)
	}
	if opts.ReplayCacheBytes > 0 {
		s.cache = lru.NewReplays(opts.ReplayCacheBytes)
	}
	if sub, ok := client.(wake.Subscriber); ok {
		s.wake = wake.New(sub)
	}
	return s, nil
}

// Options returns the options the store runs with, defaults filled in.
func (s *Store) Options() Options { return s.opts }

// Request names one operation: who asks, which logical operation, and what
// exactly it asks for.
type Request struct {
	// Scope is the caller the key belongs to, such as an account ID: equal
	// keys in different scopes are different records. It only goes into the
	// hash that names the record. Default: "".
	Scope string

	// Key is the idempotency key, chosen by the client once per logical
	// operation and reused on each retry of it. Any bytes, 1 to MaxFieldLen.
	Key string

	// Fingerprint identifies exactly what is asked, such as a hash of the
	// payload. A claim of the key with another fingerprint fails with
	// ErrMismatch. The record keeps a 16-byte fingerprint as it is, and of
	// any other the first 16 bytes of its SHA-256. Default: "" (every
	// request with the key is the same request).
	Fingerprint string

	// Label is free text kept in a running operation's record for
	// inspection, such as "POST /v1/payments". Completion drops it.
	// Default: "".
	Label string

	// Retention, if set, is how long this request's record lives in place
	// of the store's Options.Retention (see there), for operations that
	// need their own: a payment 24h, a webhook 7 days, a cheap lookup 10
	// minutes. The lease stays the store's. It must exceed the store's
	// Lease and MaxDuration (Store.ValidateRetention); the record keeps
	// the lease's threshold, so a takeover or a heartbeat by a request with
	// another retention keeps the lease as it was. Every claim, heartbeat
	// and checkpoint of the lease sets the record's TTL to it; a takeover
	// sets the taker's. Default: 0 (the store's).
	Retention time.Duration
}

func (r *Request) validate() error {
	switch {
	case r.Key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidRequest)
	case len(r.Key) > MaxFieldLen:
		return fmt.Errorf("%w: key of %d bytes exceeds %d", ErrInvalidRequest, len(r.Key), MaxFieldLen)
	case len(r.Scope) > MaxFieldLen, len(r.Fingerprint) > MaxFieldLen, len(r.Label) > MaxFieldLen:
		return fmt.Errorf("%w: scope, fingerprint or label exceeds %d bytes", ErrInvalidRequest, MaxFieldLen)
	}
	return nil
}

// Claim claims req's key for the caller, or reports what holds it, in one
// round trip. On success the Claim's Status says whether to run the operation
// (Claimed, TookOver: the caller must then Complete or Release the lease) or
// to return the stored outcome (Replayed). It fails with an *InProgressError
// while another owner's lease runs, ErrMismatch when the key was claimed with
// another fingerprint, an *ExpiredError when only the outcome's tombstone is
// left, ErrInvalidRequest for a bad req, a *ReplicationError when
// Options.Replicas did not acknowledge the claim, an error matching
// ErrEvicting or ErrNoPersistence on a Redis the store's check refuses
// (Options.RequireNoEviction, RequirePersistence: the first claim starts
// that check), and a wrapped Redis error when Redis cannot be reached.
//
// A claim whose answer is lost (the call fails or times out after Redis may
// have run it) is handed back in the background, so that it does not hold
// the key for a whole lease while nothing runs.
func (s *Store) Claim(ctx context.Context, req Request) (*Claim, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	if err := s.ValidateRetention(req.Retention); err != nil {
		return nil, err
	}
	if err := s.env.Ready(ctx); err != nil {
		return nil, err
	}
	l := s.newLease(req)
	if c, ok := s.cached(l); ok {
		return c, nil
	}
	if s.opts.NoCollapse {
		return s.claim(ctx, l)
	}
	return s.collapse(ctx, l)
}

// newLease returns the lease a claim of req would hold.
func (s *Store) newLease(req Request) *Lease {
	l := &Lease{store: s, req: req, keys: s.keys(req.Scope, req.Key), token: record.NewToken(),
		fp: record.Fingerprint(req.Fingerprint), label: req.Label, createdMS: time.Now().UnixMilli(), ret: s.retentionOf(req.Retention)}
	l.tokenArg = &l.token // a pointer goes into an interface without an allocation
	return l
}

// claim claims l's key in Redis: claim.lua, and legacy.lua for a record in
// the previous format.
func (s *Store) claim(ctx context.Context, l *Lease) (*Claim, error) {
	if err := s.out.Refusal(); err != nil {
		return nil, fmt.Errorf("redisstore: claim: %w", err)
	}
	keys := l.keys.One
	if s.opts.TombstoneRetention > 0 {
		keys = []string{l.keys.Record(), l.keys.Tombstone()}
	}
	l.started = record.AppendStarted(l.startedBuf[:0], &l.fp, l.token, l.ret.Threshold,
		&record.Started{Attempt: 1, Label: l.label, CreatedMS: l.createdMS})
	args := [3]any{&l.started, l.ret.MS, "ttl"} // "ttl": a replay says how long the record lives, for the cache
	argv := args[:2]
	if s.cache != nil {
		argv = args[:3]
	}
	lost := (*holder)(l)
	start := time.Now()
	reply, err := s.call(ctx, lost, claimScript, keys, argv...)
	c, err := s.claimed(l, reply, err, start)
	if errors.Is(err, errLegacy) {
		reply, err = s.call(ctx, lost, legacyScript, []string{l.keys.Record(), l.keys.LegacyLease()}, &l.started, l.ret.MS, l.req.Fingerprint)
		c, err = s.claimed(l, reply, err, start)
		if errors.Is(err, errLegacy) { // the old record went meanwhile: claim afresh
			reply, err = s.call(ctx, lost, claimScript, keys, argv...)
			c, err = s.claimed(l, reply, err, start)
		}
	}
	return c, err
}

// call runs script on keys within ctx (see script.Runner.Run). lost, if not
// nil, is told when the call failed without an answer from Redis, so
// that Redis may have run it: at once, or when a call given up on at ctx's
// end ends. It keeps neither keys nor args.
func (s *Store) call(ctx context.Context, lost script.Lost, sc *script.Script, keys []string, args ...any) (any, error) {
	return s.runner.Run(ctx, sc, keys, lost, args...)
}

// State is the state of a record.
type State string

// The states a record goes through.
const (
	// Started: an owner claimed the record and has not completed it.
	Started State = "started"
	// Completed: the outcome is stored and replayed.
	Completed State = "completed"
	// Released: a started record whose owner gave its lease back without
	// an outcome (Lease.Interrupt, or Release of a record with history):
	// nobody holds it, and the next claim takes it over at once.
	Released State = "released"
)

// Record is what Redis holds for one key, as [Store.Lookup] reads it.
type Record struct {
	// State is Started, Released or Completed.
	State State
	// Scope and Key are those Lookup was given.
	Scope, Key string
	// Label is that of the request that started the record; completion drops it.
	Label string
	// Fingerprint is the stored fingerprint (see Request.Fingerprint).
	Fingerprint string
	// Attempt is 1, plus one per takeover.
	Attempt int
	// RecoveryPoint is the last checkpoint; empty if none. Completion drops it.
	RecoveryPoint string
	// RecoveryData is its data.
	RecoveryData []byte
	// Response is the stored outcome when Completed, else nil.
	Response *Response
	// CreatedAt is when the record was first claimed, by the clock of the
	// process that claimed it; zero once completed.
	CreatedAt time.Time
	// TTL is how long the record has left to live.
	TTL time.Duration
	// LeaseTTL is how long the owner's lease has left; zero when none is held.
	LeaseTTL time.Duration
}

// Lookup reads the record for scope and key, for inspection and tests. It
// changes nothing. It returns ErrNotFound when there is no record, and an
// error matching ErrUnexpectedReply when the key holds something else.
func (s *Store) Lookup(ctx context.Context, scope, key string) (*Record, error) {
	reply, err := s.call(ctx, nil, lookupScript, s.keys(scope, key).One)
	if err != nil {
		return nil, fmt.Errorf("redisstore: lookup: %w", err)
	}
	rec, err := found(reply)
	if err != nil {
		return nil, err
	}
	rec.Scope, rec.Key = scope, key
	return rec, nil
}

// keys returns the key names for scope and key.
func (s *Store) keys(scope, key string) record.Keys { return record.NewKeys(s.opts.Prefix, scope, key) }
