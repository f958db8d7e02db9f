package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Lease is a caller's ownership of one record, from a successful claim until
// it completes or releases it. Every write it makes is fenced by its token:
// once another caller has taken the record over, they fail with ErrLeaseLost
// and change nothing.
//
// Its methods are safe for concurrent use (a heartbeat may extend the lease
// while the owner checkpoints); its fields are set by the claim and never
// change.
type Lease struct {
	store *Store
	req   Request
	keys  [2]string
	token string

	// Attempt is 1 for a fresh claim, plus one per takeover.
	Attempt int

	// RecoveryPoint is the last point a previous owner recorded with
	// Checkpoint before it lost the record; empty on a fresh claim or when
	// it recorded none. Checkpoint does not change it.
	RecoveryPoint string

	// RecoveryData is the data checkpointed with RecoveryPoint.
	RecoveryData []byte
}

// Token returns the lease's fencing token, unique to this claim.
func (l *Lease) Token() string { return l.token }

// Request returns the request the lease was claimed for.
func (l *Lease) Request() Request { return l.req }

// Complete stores resp as the operation's outcome, which every later claim of
// the key gets as a replay, and drops the lease; the record then lives for the
// store's retention. The side effect has happened by now, so Complete tries
// hard: if Redis cannot be reached it tries again with backoff (up to 8 tries
// in about 2s) until ctx is done. A repeat by the same lease is harmless, so
// a lost reply costs nothing. It returns ErrLeaseLost if the record is no
// longer this lease's.
func (l *Lease) Complete(ctx context.Context, resp Response) error {
	code := strconv.Itoa(resp.Code)
	return persist(ctx, func() error {
		reply, err := l.store.eval(ctx, completeScript, l.keys[:], l.token, code, resp.Body, l.store.retentionMS)
		return decodeReplicated("complete", reply, err)
	})
}

// Release gives the key up without an outcome, for a failure that committed
// nothing: the next claim runs the operation again. If a recovery point was
// checkpointed, the record keeps it and only the lease goes, so the next claim
// takes over at once and resumes. Like Complete, it tries again while Redis
// cannot be reached. Releasing a record that no longer exists succeeds; it
// returns ErrLeaseLost if another lease owns the record or it was completed.
func (l *Lease) Release(ctx context.Context) error {
	return persist(ctx, func() error {
		reply, err := releaseScript.Run(ctx, l.store.client, l.keys[:], l.token).Result()
		return decodeOK("release", reply, err)
	})
}

// persist runs a write that is safe to repeat until it reaches Redis: up to
// 8 tries, 10ms apart doubling to 500ms, while ctx lasts. Answers from Redis
// (ErrLeaseLost, a script error) are final; only failures to reach it are
// tried again.
func persist(ctx context.Context, write func() error) error {
	backoff := 10 * time.Millisecond
	for try := 1; ; try++ {
		err := write()
		if err == nil || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrUnexpectedReply) || errors.Is(err, ErrNotReplicated) ||
			isRedisReply(err) || try == 8 {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// isRedisReply reports whether err is a final error reply from Redis
// (WRONGTYPE, a script error): Redis was reached and trying again cannot
// help. Replies that say "not now" (loading after a restart, cluster down,
// failing over, a slot moved or migrating) are not final.
func isRedisReply(err error) bool {
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

// Extend pushes the lease out to the store's full lease duration from now. It
// returns ErrLeaseLost if the record is no longer this lease's.
func (l *Lease) Extend(ctx context.Context) error {
	reply, err := extendScript.Run(ctx, l.store.client, l.keys[:], l.token, l.store.leaseMS).Result()
	return decodeOK("extend", reply, err)
}

// Checkpoint records that the operation reached point, with data a later
// owner needs to resume from there (a charge ID, say), and pushes the lease
// out. A caller that takes the record over finds them in its Lease's
// RecoveryPoint and RecoveryData. It returns ErrLeaseLost if the record is no
// longer this lease's.
func (l *Lease) Checkpoint(ctx context.Context, point string, data []byte) error {
	reply, err := l.store.eval(ctx, checkpointScript, l.keys[:], l.token, l.store.leaseMS, point, data)
	return decodeReplicated("checkpoint", reply, err)
}

// DerivedKey returns an idempotency key for one step of the operation to hand
// to a downstream provider (a payment API, say): the same for every attempt
// and takeover of this operation, and different for every other (prefix,
// scope, key, step). Providers scope keys by our account, not by our callers,
// so the client's key plus a suffix would let two callers' equal keys collide
// there; this key cannot. It is 32 characters of base64url and reveals
// nothing of the scope or key.
func (l *Lease) DerivedKey(step string) string {
	return DerivedKey(l.store.prefix, l.req.Scope, l.req.Key, step)
}

// DerivedKey is [Lease.DerivedKey] without a lease, for a caller that knows
// the store's prefix, the scope and the key.
func DerivedKey(prefix, scope, key, step string) string {
	h := sha256.New()
	h.Write([]byte("idemkey derived key\x00"))
	for _, s := range [...]string{prefix, scope, key, step} {
		var n [binary.MaxVarintLen64]byte
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:24])
}

// Supervise watches over an operation running on the lease, whose context
// cancel cancels: it keeps the lease alive (KeepAlive) and cancels with
// cause ErrLeaseLost if the lease is lost; with Options.MaxDuration set, once
// that passes it stops extending the lease, so a stuck operation cannot hold
// the key, and cancels with cause ErrMaxDuration. stop ends the watch; call
// it when the operation returns, before completing or releasing the lease.
func (l *Lease) Supervise(cancel context.CancelCauseFunc) (stop func()) {
	stopBeat := l.KeepAlive(func() { cancel(ErrLeaseLost) })
	if l.store.maxDuration <= 0 {
		return stopBeat
	}
	over := time.AfterFunc(l.store.maxDuration, func() {
		stopBeat()
		cancel(ErrMaxDuration)
	})
	return func() {
		over.Stop()
		stopBeat()
	}
}

// KeepAlive extends the lease every Options.Heartbeat until stop is called,
// so that a live owner is never taken over however long it runs. If Redis
// reports the lease lost (another caller took the record over), KeepAlive
// calls onLost (once, from its own goroutine) and stops; errors reaching
// Redis are retried at the next beat. Nothing runs between beats: an owner
// that finishes within one interval costs one timer. The beats use their own
// contexts, each bounded by the interval, so cancelling the owner's request
// does not stop them; only stop does. stop waits for a beat in flight and may
// be called more than once. onLost may be nil.
func (l *Lease) KeepAlive(onLost func()) (stop func()) {
	every := l.store.heartbeat
	var (
		mu       sync.Mutex
		stopped  bool
		inflight sync.WaitGroup
		t        *time.Timer
	)
	beat := func() {
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		inflight.Add(1)
		mu.Unlock()
		defer inflight.Done()
		ctx, cancel := context.WithTimeout(context.Background(), every)
		err := l.Extend(ctx)
		cancel()
		if errors.Is(err, ErrLeaseLost) {
			if onLost != nil {
				onLost()
			}
			return
		}
		mu.Lock()
		if !stopped {
			t.Reset(every)
		}
		mu.Unlock()
	}
	mu.Lock()
	t = time.AfterFunc(every, beat)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
		inflight.Wait()
	}
}
