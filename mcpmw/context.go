package mcpmw

import (
	"context"
	"time"

	"github.com/idemkey/idemkey/redisstore"
)

// info is what the middleware hands the tool through its context. The
// lease stays here: tools reach it only through the functions below.
type info struct {
	key     string
	lease   *redisstore.Lease
	timeout time.Duration // for Checkpoint
}

type ctxKey struct{}

func fromContext(ctx context.Context) *info {
	i, _ := ctx.Value(ctxKey{}).(*info)
	return i
}

// Key returns the call's idempotency key, or "" when the call is not
// guarded.
func Key(ctx context.Context) string {
	if i := fromContext(ctx); i != nil {
		return i.key
	}
	return ""
}

// Attempt returns 1 for the first run of the call's key, n for the run that
// took it over from n-1 earlier attempts that ended without an outcome (cut
// off, crashed), and 0 when the call is not guarded. A tool with Attempt > 1
// should reconcile with what RecoveryPoint says ran.
func Attempt(ctx context.Context) int {
	if i := fromContext(ctx); i != nil {
		return i.lease.Attempt
	}
	return 0
}

// DerivedKey returns the idempotency key to hand a downstream provider (an
// email or payment API) for one step of the call: the same on every retry
// and takeover, unique per (caller, tool, key, step), revealing none of
// them. It returns "" when the call is not guarded.
func DerivedKey(ctx context.Context, step string) string {
	if i := fromContext(ctx); i != nil {
		return i.lease.DerivedKey(step)
	}
	return ""
}

// Checkpoint records that the tool reached point, with data a later
// attempt needs to resume (say, the provider's message ID), and extends
// the lease. If this attempt is cut off, the attempt that takes the key
// over finds them with RecoveryPoint. It goes through even if the caller
// has gone, within Options.Timeout. It returns ErrNotProtected when the
// call is not guarded, redisstore.ErrLeaseLost if another attempt has
// taken the key over, and a *redisstore.ReplicationError if the store
// waits for replicas and too few acknowledged.
func Checkpoint(ctx context.Context, point string, data []byte) error {
	i := fromContext(ctx)
	if i == nil {
		return ErrNotProtected
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), i.timeout)
	defer cancel()
	return i.lease.Checkpoint(ctx, point, data)
}

// RecoveryPoint returns the point and data an earlier attempt at this call
// checkpointed before it ended without an outcome, or "" and nil.
func RecoveryPoint(ctx context.Context) (point string, data []byte) {
	if i := fromContext(ctx); i != nil {
		return i.lease.RecoveryPoint, i.lease.RecoveryData
	}
	return "", nil
}
