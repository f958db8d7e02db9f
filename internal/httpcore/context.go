package httpcore

import (
	"context"
	"errors"
	"time"

	"github.com/idemkey/idemkey/redisstore"
)

// ErrNotProtected is returned by Checkpoint for a request that the
// middleware let through without a lease (no middleware, an optional key
// absent, a safe method, or FailOpen with Redis down).
var ErrNotProtected = errors.New("idemkey: request not protected by the idempotency middleware")

// Info is what the middleware hands the handler through the request context.
type Info struct {
	// Key is the client's idempotency key.
	Key string
	// Lease is the handler's hold on the key: Attempt, RecoveryPoint,
	// RecoveryData, Checkpoint and DerivedKey.
	Lease *redisstore.Lease

	timeout time.Duration
	scope   string // for the observer
}

type ctxKey struct{}

// FromContext returns the Info the middleware put in ctx, or nil when the
// request is not protected.
func FromContext(ctx context.Context) *Info {
	info, _ := ctx.Value(ctxKey{}).(*Info)
	return info
}

// Key returns the idempotency key of the request ctx belongs to, or "".
func Key(ctx context.Context) string {
	if info := FromContext(ctx); info != nil {
		return info.Key
	}
	return ""
}

// lease returns the lease of the request ctx belongs to, or nil.
func lease(ctx context.Context) *redisstore.Lease {
	if info := FromContext(ctx); info != nil {
		return info.Lease
	}
	return nil
}

// Attempt returns which attempt at its key the request ctx belongs to runs
// as: 1 for the first, more after takeovers; 0 when it is not protected.
func Attempt(ctx context.Context) int {
	if l := lease(ctx); l != nil {
		return l.Attempt
	}
	return 0
}

// DerivedKey returns the key to hand a downstream provider for one step of
// the request (see redisstore.Lease.DerivedKey), or "" when the request is
// not protected.
func DerivedKey(ctx context.Context, step string) string {
	if l := lease(ctx); l != nil {
		return l.DerivedKey(step)
	}
	return ""
}

// RecoveryPoint returns the point and data a previous attempt at the
// request checkpointed before it died, or "" and nil.
func RecoveryPoint(ctx context.Context) (point string, data []byte) {
	if l := lease(ctx); l != nil {
		return l.RecoveryPoint, l.RecoveryData
	}
	return "", nil
}

// Checkpoint records that the request's handler reached point, with the
// data a later attempt needs to resume from there. It goes through even if
// the client has gone, within the middleware's Timeout. It returns
// ErrNotProtected for a request without a lease, redisstore.ErrLeaseLost
// if another attempt has taken the key over, and a
// *redisstore.ReplicationError if the store waits for replicas and too few
// acknowledged.
func Checkpoint(ctx context.Context, point string, data []byte) error {
	info := FromContext(ctx)
	if info == nil {
		return ErrNotProtected
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), info.timeout)
	defer cancel()
	return info.Lease.Checkpoint(ctx, point, data)
}
