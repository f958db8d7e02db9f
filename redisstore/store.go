package redisstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/lua"
)

var (
	claimScript      = redis.NewScript(lua.Claim)
	completeScript   = redis.NewScript(lua.Complete)
	releaseScript    = redis.NewScript(lua.Release)
	extendScript     = redis.NewScript(lua.Extend)
	checkpointScript = redis.NewScript(lua.Checkpoint)
	lookupScript     = redis.NewScript(lua.Lookup)

	// sources maps the scripts that may run with WAIT to their source.
	sources = map[*redis.Script]string{claimScript: lua.Claim, completeScript: lua.Complete, checkpointScript: lua.Checkpoint}
)

// MaxFieldLen is the longest Request.Key, Scope, Fingerprint or Label the
// store accepts, in bytes.
const MaxFieldLen = 1024

// Options configures a Store. The zero value gives the defaults.
type Options struct {
	// Prefix starts every Redis key the store writes. It must not contain
	// '{' or '}', which would change the keys' cluster hash tag.
	// Default: "idem:".
	Prefix string

	// Retention is how long a record lives: from its creation while it runs,
	// and from its completion once completed. Clients must retry within it;
	// a retry after it runs the operation again. Must exceed Lease.
	// Default: 24h.
	Retention time.Duration

	// Lease is how long a claim holds a key without a sign of life. An owner
	// that stops extending it (crashed, partitioned) is taken over this long
	// after its last claim, extend or checkpoint. Default: 10s.
	Lease time.Duration

	// Heartbeat is the interval at which [Lease.KeepAlive] and [Store.Do]
	// extend a running owner's lease. Must be shorter than Lease.
	// Default: Lease/3.
	Heartbeat time.Duration

	// Replicas makes every claim, checkpoint and completion wait until this
	// many replicas acknowledge it (WAIT, sent in the same round trip on the
	// same connection), so that a failover to an acknowledging replica
	// cannot lose it: a claim no replica saw would let a retry on the new
	// master run the operation a second time. A claim acknowledged by too
	// few is released and fails with ErrNotReplicated before anything runs.
	// Replication stays asynchronous: WAIT narrows the window, a failover
	// may still promote a replica that had not acknowledged. Needs a
	// *redis.Client or *redis.ClusterClient. Default: 0 (no waiting).
	Replicas int

	// ReplicaTimeout bounds each wait for replicas. Default: 100ms.
	ReplicaTimeout time.Duration

	// MaxDuration bounds how long [Store.Do] lets its function run: past it,
	// the function's context is cancelled and the heartbeat stops, so a stuck
	// function cannot hold its key for ever. Zero means no bound.
	// Default: 0.
	MaxDuration time.Duration
}

// Store claims, completes and replays idempotency records in Redis. It is
// safe for concurrent use; create one per Redis deployment and share it.
type Store struct {
	client         redis.Scripter
	prefix         string
	lease          time.Duration
	retention      time.Duration
	heartbeat      time.Duration
	maxDuration    time.Duration
	replicas       int
	replicaTimeout time.Duration
	leaseMS        string
	retentionMS    string
}

// New returns a Store that runs its scripts on client: a *redis.Client,
// *redis.ClusterClient, *redis.Ring, a failover client or any other
// redis.Scripter. It returns an error if opts is invalid; it does not contact
// Redis.
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
	case opts.Replicas < 0 || opts.ReplicaTimeout < 0:
		return nil, fmt.Errorf("redisstore: negative replicas %d or replica timeout %v", opts.Replicas, opts.ReplicaTimeout)
	}
	if opts.Replicas > 0 {
		switch client.(type) {
		case *redis.Client, *redis.ClusterClient:
		default:
			return nil, fmt.Errorf("redisstore: Replicas needs a *redis.Client or *redis.ClusterClient, not %T", client)
		}
	}
	return &Store{
		client:         client,
		prefix:         opts.Prefix,
		lease:          opts.Lease,
		retention:      opts.Retention,
		heartbeat:      opts.Heartbeat,
		maxDuration:    opts.MaxDuration,
		replicas:       opts.Replicas,
		replicaTimeout: opts.ReplicaTimeout,
		leaseMS:        strconv.FormatInt(opts.Lease.Milliseconds(), 10),
		retentionMS:    strconv.FormatInt(opts.Retention.Milliseconds(), 10),
	}, nil
}

// Options returns the options the store runs with, defaults filled in.
func (s *Store) Options() Options {
	return Options{Prefix: s.prefix, Retention: s.retention, Lease: s.lease, Heartbeat: s.heartbeat,
		MaxDuration: s.maxDuration, Replicas: s.replicas, ReplicaTimeout: s.replicaTimeout}
}

// Request names one operation: who asks, which logical operation, and what
// exactly it asks for.
type Request struct {
	// Scope is the caller the key belongs to, such as an account ID: equal
	// keys in different scopes are different records. It is stored in clear
	// for inspection, so it must never be a credential. Default: "".
	Scope string

	// Key is the idempotency key, chosen by the client once per logical
	// operation and reused on each retry of it. Any bytes, 1 to MaxFieldLen.
	Key string

	// Fingerprint identifies exactly what is asked, such as a hash of the
	// payload. A claim of the key with another fingerprint fails with
	// ErrMismatch. Compared byte for byte. Default: "" (every request with the
	// key is the same request).
	Fingerprint string

	// Label is free text kept in the record for inspection, such as
	// "POST /v1/payments". Default: "".
	Label string
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

// Status says what a successful claim found.
type Status int

// The outcomes of a successful claim. The Lua reply codes they come from are
// in reply.go.
const (
	// Claimed: the key was free. Run the operation with Claim.Lease.
	Claimed Status = iota + 1
	// TookOver: a previous owner's lease ran out before it completed (it
	// crashed or stalled). Run the operation with Claim.Lease, resuming from
	// its RecoveryPoint.
	TookOver
	// Replayed: the operation completed before. Claim.Response is its outcome.
	Replayed
)

// String returns "claimed", "took over" or "replayed".
func (s Status) String() string {
	switch s {
	case Claimed:
		return "claimed"
	case TookOver:
		return "took over"
	case Replayed:
		return "replayed"
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// Response is a stored outcome, replayed byte for byte.
type Response struct {
	// Code is an application-defined status, such as an HTTP status code.
	Code int
	// Body is the outcome's bytes.
	Body []byte
}

// Claim is the result of a successful [Store.Claim].
type Claim struct {
	// Status says what the claim found.
	Status Status
	// Lease is the caller's hold on the record when Status is Claimed or
	// TookOver; nil when Replayed.
	Lease *Lease
	// Response is the stored outcome when Status is Replayed.
	Response Response
}

// Claim claims req's key for the caller, or reports what holds it, in one
// round trip. On success the Claim's Status says whether to run the operation
// (Claimed, TookOver: the caller must then Complete or Release the lease) or
// to return the stored outcome (Replayed). It fails with an *InProgressError
// while another owner's lease runs, ErrMismatch when the key was claimed with
// another fingerprint, ErrInvalidRequest for a bad req, a *ReplicationError
// when Options.Replicas did not acknowledge the claim, and a wrapped Redis
// error when Redis cannot be reached.
func (s *Store) Claim(ctx context.Context, req Request) (*Claim, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	l := &Lease{store: s, req: req, token: newToken()}
	l.keys = s.keys(req.Scope, req.Key)
	reply, err := s.eval(ctx, claimScript, l.keys[:],
		req.Fingerprint, l.token, s.leaseMS, s.retentionMS, packMeta(req, time.Now()))
	var notReplicated error
	if errors.Is(err, ErrNotReplicated) {
		notReplicated, err = err, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redisstore: claim: %w", err)
	}
	c, err := decodeClaim(reply)
	if err != nil {
		return nil, err
	}
	if notReplicated != nil && c.Lease != nil {
		// Nothing has run yet: give the key back rather than run on a claim
		// a failover could forget.
		l.Attempt = c.Lease.Attempt
		_ = l.Release(context.WithoutCancel(ctx))
		return nil, notReplicated
	}
	if c.Lease != nil {
		l.Attempt, l.RecoveryPoint, l.RecoveryData = c.Lease.Attempt, c.Lease.RecoveryPoint, c.Lease.RecoveryData
		c.Lease = l
	}
	return c, nil
}

// State is the state of a record.
type State string

// The states a record goes through.
const (
	// Started: an owner claimed the record and has not completed it.
	Started State = "started"
	// Completed: the outcome is stored and replayed.
	Completed State = "completed"
)

// Record is what Redis holds for one key, as [Store.Lookup] reads it.
type Record struct {
	// State is Started or Completed.
	State State
	// Scope, Key, Label and Fingerprint are those of the request that
	// created the record.
	Scope, Key, Label, Fingerprint string
	// Attempt is 1, plus one per takeover.
	Attempt int
	// RecoveryPoint is the last checkpoint; empty if none.
	RecoveryPoint string
	// RecoveryData is its data; completion drops it.
	RecoveryData []byte
	// Response is the stored outcome when Completed, else nil.
	Response *Response
	// CreatedAt is when the record was created, by the clock of the process
	// that first claimed it.
	CreatedAt time.Time
	// TTL is how long the record has left to live.
	TTL time.Duration
	// LeaseTTL is how long the owner's lease has left; zero when none is held.
	LeaseTTL time.Duration
}

// Lookup reads the record for scope and key, for inspection and tests. It
// changes nothing. It returns ErrNotFound when there is no record.
func (s *Store) Lookup(ctx context.Context, scope, key string) (*Record, error) {
	keys := s.keys(scope, key)
	reply, err := lookupScript.Run(ctx, s.client, keys[:]).Slice()
	if err != nil {
		return nil, fmt.Errorf("redisstore: lookup: %w", err)
	}
	return decodeRecord(reply)
}

// keys returns the record's and lease's key names for scope and key.
func (s *Store) keys(scope, key string) [2]string {
	var stack [256]byte
	b := binary.AppendUvarint(stack[:0], uint64(len(scope)))
	b = append(append(b, scope...), key...)
	sum := sha256.Sum256(b)

	const lease = ":lease"
	n := len(s.prefix) + 1 + 22 + 1
	buf := make([]byte, n+len(lease))
	copy(buf, s.prefix)
	buf[len(s.prefix)] = '{'
	base64.RawURLEncoding.Encode(buf[len(s.prefix)+1:], sum[:16])
	buf[n-1] = '}'
	copy(buf[n:], lease)
	all := string(buf)
	return [2]string{all[:n], all}
}

// packMeta packs the fields only Lookup reads into one hash field: one
// field instead of four saves Redis about 230 bytes per record.
func packMeta(req Request, created time.Time) []byte {
	b := make([]byte, 0, 3*binary.MaxVarintLen64+len(req.Scope)+len(req.Key)+len(req.Label)+8)
	for _, f := range [...]string{req.Scope, req.Key, req.Label} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	return binary.AppendVarint(b, created.UnixMilli())
}

// unpackMeta is packMeta's inverse.
func unpackMeta(b []byte, rec *Record) bool {
	var fields [3]string
	for i := range fields {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return false
		}
		fields[i], b = string(b[k:k+int(n)]), b[k+int(n):]
	}
	ms, k := binary.Varint(b)
	if k <= 0 || k != len(b) {
		return false
	}
	rec.Scope, rec.Key, rec.Label, rec.CreatedAt = fields[0], fields[1], fields[2], time.UnixMilli(ms)
	return true
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b[:])
}
