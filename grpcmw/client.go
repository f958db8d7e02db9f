package grpcmw

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkey/idemkey/idemclient"
)

// ClientOptions configures UnaryClientInterceptor. The zero value gives the
// defaults: a key for every unary call, and no retries of its own.
type ClientOptions struct {
	// Match, if set, picks the methods that get a key by their full name;
	// the others pass through untouched. Methods builds one from a list.
	// Default: nil (every unary method).
	Match func(fullMethod string) bool

	// NewKey mints the key of a call that has none. Default:
	// idemclient.NewKey, a UUIDv7.
	NewKey func() string

	// MaxAttempts, above 1, makes the interceptor retry a call itself, with
	// the same key, on Aborted (the first attempt is still in progress) and
	// Unavailable, and on an attempt that ran out of AttemptTimeout while
	// the call's own context lives, up to this many attempts in all. Leave
	// it at 1 when grpc-go's retry policy or a retry interceptor does the
	// retrying. Default: 1 (no retries of its own).
	MaxAttempts int

	// AttemptTimeout, if set, bounds each attempt, so that an attempt stuck
	// on a slow server is given up and retried with the same key (the
	// server's run goes on and its retry gets Aborted, then the replay).
	// Default: 0 (the call's context alone).
	AttemptTimeout time.Duration

	// BaseDelay is the backoff ceiling of the first retry of an answer
	// without a RetryInfo; it doubles with each retry, with full jitter.
	// Default: 100ms.
	BaseDelay time.Duration

	// MaxDelay caps the backoff ceiling. Default: 10s.
	MaxDelay time.Duration

	// MaxRetryAfter caps the delay a RetryInfo asks for. Default: 30s.
	MaxRetryAfter time.Duration

	// Budget bounds the interceptor's own retries per target (the
	// ClientConn's): each call adds Budget.Ratio of a token, time adds
	// Budget.PerSecond a second up to Budget.Burst, and each retry takes
	// one; with none left the answer in hand is returned. Default: Burst
	// 10, Ratio 0.2, PerSecond 1 (as idemclient's).
	Budget BudgetOptions
}

// BudgetOptions configures the client's retry budget; each zero field
// means its default.
type BudgetOptions struct {
	// Burst is the most tokens a target holds, and what it starts with.
	// Default: 10.
	Burst float64
	// Ratio is the tokens each call adds. Default: 0.2.
	Ratio float64
	// PerSecond is the tokens a target gains each second. Default: 1.
	PerSecond float64
}

// WithKey returns a copy of ctx whose calls carry key as their
// idempotency-key, in place of any set before: pin one key per logical
// operation, for example to keep it across a restart of the process. The
// client interceptor never changes a key the caller set.
func WithKey(ctx context.Context, key string) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	md.Set(MetadataKey, key)
	return metadata.NewOutgoingContext(ctx, md)
}

// Replayed reports whether header, the header metadata of a call (see
// grpc.Header), says its answer is the stored outcome of an earlier
// execution.
func Replayed(header metadata.MD) bool {
	vs := header.Get(MetadataReplayed)
	return len(vs) > 0 && vs[0] == "true"
}

// UnaryClientInterceptor returns an interceptor that gives each unary call
// without an idempotency-key a fresh one (ClientOptions.NewKey), once per
// logical call, so that every retry of the call carries the same key:
//
//   - grpc-go's own retry policy (the service config's retryPolicy) retries
//     below every interceptor, resending the metadata set here: any place in
//     the chain works.
//   - A retry interceptor (go-grpc-middleware's retry, say) must come after
//     this one, in grpc.WithChainUnaryInterceptor(grpcmw.UnaryClientInterceptor(...),
//     retry.UnaryClientInterceptor(...)): placed before it, it would call
//     this interceptor once per attempt, and each attempt would get a key of
//     its own.
//
// A key the caller set is sent as it is; one that breaks the key rules, or
// more than one, fails the call with InvalidArgument before anything is
// sent. With ClientOptions.MaxAttempts above 1 it also retries itself,
// honouring the server's RetryInfo. It panics on a negative option, a
// programming error. The interceptor is safe for concurrent use.
func UnaryClientInterceptor(opts ClientOptions) grpc.UnaryClientInterceptor {
	o := opts.withDefaults()
	b := &budget{o: o.Budget, targets: map[string]*bucket{}}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		if o.Match != nil && !o.Match(method) {
			return invoker(ctx, method, req, reply, cc, callOpts...)
		}
		md, _ := metadata.FromOutgoingContext(ctx)
		switch vals := md.Get(MetadataKey); len(vals) {
		case 0:
			ctx = metadata.AppendToOutgoingContext(ctx, MetadataKey, o.NewKey())
		case 1:
			if _, reason := parseKey(vals[0]); reason != "" {
				return status.Error(codes.InvalidArgument, "grpcmw: malformed idempotency-key: "+reason)
			}
		default:
			return status.Error(codes.InvalidArgument, fmt.Sprintf("grpcmw: the call carries %d idempotency-key values; set one", len(vals)))
		}
		if o.MaxAttempts <= 1 {
			return invoker(ctx, method, req, reply, cc, callOpts...)
		}
		target := ""
		if cc != nil {
			target = cc.Target()
		}
		b.deposit(target, time.Now())
		for attempt := 1; ; attempt++ {
			actx, cancel := ctx, context.CancelFunc(func() {})
			if o.AttemptTimeout > 0 {
				actx, cancel = context.WithTimeout(ctx, o.AttemptTimeout)
			}
			err := invoker(actx, method, req, reply, cc, callOpts...)
			cancel()
			if err == nil || attempt >= o.MaxAttempts || ctx.Err() != nil {
				return err
			}
			delay, ok := o.retry(err, attempt)
			if !ok {
				return err
			}
			if d, has := ctx.Deadline(); has && time.Until(d) <= delay {
				return err
			}
			if !b.withdraw(target, time.Now()) {
				return err
			}
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return err
			case <-t.C:
			}
		}
	}
}

func (o ClientOptions) withDefaults() ClientOptions {
	if o.NewKey == nil {
		o.NewKey = idemclient.NewKey
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 1
	}
	if o.BaseDelay == 0 {
		o.BaseDelay = 100 * time.Millisecond
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = 10 * time.Second
	}
	if o.MaxRetryAfter == 0 {
		o.MaxRetryAfter = 30 * time.Second
	}
	if o.Budget.Burst == 0 {
		o.Budget.Burst = 10
	}
	if o.Budget.Ratio == 0 {
		o.Budget.Ratio = 0.2
	}
	if o.Budget.PerSecond == 0 {
		o.Budget.PerSecond = 1
	}
	if o.MaxAttempts < 0 || o.AttemptTimeout < 0 || o.BaseDelay < 0 || o.MaxDelay < 0 || o.MaxRetryAfter < 0 ||
		o.Budget.Burst < 0 || o.Budget.Ratio < 0 || o.Budget.PerSecond < 0 {
		panic("grpcmw: negative value in ClientOptions")
	}
	return o
}

// retry reports whether the answer err to attempt is worth another attempt
// with the same key, and after how long: the RetryInfo delay (capped at
// MaxRetryAfter), else backoff with full jitter.
func (o ClientOptions) retry(err error, attempt int) (time.Duration, bool) {
	st := status.Convert(err)
	switch st.Code() {
	case codes.Aborted, codes.Unavailable:
	case codes.DeadlineExceeded:
		if o.AttemptTimeout == 0 { // the call's own deadline: it has ended
			return 0, false
		}
	default:
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return max(0, min(ri.GetRetryDelay().AsDuration(), o.MaxRetryAfter)), true
		}
	}
	ceiling := o.BaseDelay
	for i := 1; i < attempt && ceiling < o.MaxDelay; i++ {
		ceiling *= 2
	}
	return time.Duration(rand.Float64() * float64(min(ceiling, o.MaxDelay))), true
}

// budget is a retry budget per target: a token bucket each.
type budget struct {
	o       BudgetOptions
	mu      sync.Mutex
	targets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// maxTargets bounds the targets a budget tracks; past it, it starts afresh.
const maxTargets = 1024

func (b *budget) bucket(target string, now time.Time) *bucket {
	k, ok := b.targets[target]
	if !ok {
		if len(b.targets) >= maxTargets {
			clear(b.targets)
		}
		k = &bucket{tokens: b.o.Burst, at: now}
		b.targets[target] = k
		return k
	}
	if dt := now.Sub(k.at); dt > 0 {
		k.tokens = min(b.o.Burst, k.tokens+dt.Seconds()*b.o.PerSecond)
		k.at = now
	}
	return k
}

func (b *budget) deposit(target string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.bucket(target, now)
	k.tokens = min(b.o.Burst, k.tokens+b.o.Ratio)
}

func (b *budget) withdraw(target string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.bucket(target, now)
	if k.tokens < 1 {
		return false
	}
	k.tokens--
	return true
}
