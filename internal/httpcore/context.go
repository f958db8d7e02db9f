package httpcore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"time"

	"github.com/idemkey/idemkey/redisstore"
)

// ErrNotProtected is returned by Checkpoint for a request that no
// idempotency middleware has seen: a route without it, or one it let
// through untouched (a safe method, Skip).
var ErrNotProtected = errors.New("idemkey: request not protected by the idempotency middleware")

// Info is what the middleware hands the handler through the request
// context: the lease of a protected request; for one it runs unprotected
// (Optional without a key, FailOpen with Redis down), no lease but a nonce
// for its derived keys.
type Info struct {
	// Key is the client's idempotency key ("" without one).
	Key string
	// Lease is the handler's hold on the key; nil when unprotected.
	Lease *redisstore.Lease

	nonce   [16]byte      // unprotected only: random, one per request
	timeout time.Duration // for Checkpoint
	scope   string        // for the observer
}

type ctxKey struct{}

// fromContext returns the Info the middleware put in ctx, or nil.
func fromContext(ctx context.Context) *Info {
	i, _ := ctx.Value(ctxKey{}).(*Info)
	return i
}

// unprotected returns ctx for a request the middleware runs without a lease.
func unprotected(ctx context.Context, key string) context.Context {
	i := &Info{Key: key}
	_, _ = rand.Read(i.nonce[:]) // never fails (crypto/rand)
	return context.WithValue(ctx, ctxKey{}, i)
}

// Key returns the idempotency key of the request ctx belongs to, or "".
func Key(ctx context.Context) string {
	if i := fromContext(ctx); i != nil {
		return i.Key
	}
	return ""
}

// lease returns the lease of the request ctx belongs to, or nil.
func lease(ctx context.Context) *redisstore.Lease {
	if i := fromContext(ctx); i != nil {
		return i.Lease
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
// the request (see redisstore.Lease.DerivedKey). For a request the
// middleware runs unprotected (Optional without a key, FailOpen) it is a
// fresh random key per request and step, never empty, and nothing dedupes
// the request's retries; on a route without the middleware it is "".
func DerivedKey(ctx context.Context, step string) string {
	i := fromContext(ctx)
	switch {
	case i == nil:
		return ""
	case i.Lease != nil:
		return i.Lease.DerivedKey(step)
	}
	h := sha256.New()
	h.Write([]byte("idemkey unprotected derived key\x00"))
	h.Write(i.nonce[:])
	h.Write([]byte(step))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:24])
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
// the client has gone, within the middleware's Timeout. For a request the
// middleware runs unprotected (Optional without a key, FailOpen) there is
// nothing to record it in: it does nothing and returns nil, so that the
// handler carries on as it would with a lease. It returns ErrNotProtected
// on a route without the middleware, redisstore.ErrLeaseLost if another
// attempt has taken the key over, and a *redisstore.ReplicationError if the
// store waits for replicas and too few acknowledged.
func Checkpoint(ctx context.Context, point string, data []byte) error {
	i := fromContext(ctx)
	switch {
	case i == nil:
		return ErrNotProtected
	case i.Lease == nil:
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), i.timeout)
	defer cancel()
	return i.Lease.Checkpoint(ctx, point, data)
}
