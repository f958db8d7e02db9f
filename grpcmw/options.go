package grpcmw

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Options configures UnaryServerInterceptor. The zero value gives the
// defaults.
type Options struct {
	// Match, if set, picks the methods the interceptor protects by their
	// full name ("/payments.v1.Payments/Charge"); the others pass through
	// untouched. Methods builds one from a list. Default: nil (every unary
	// method).
	Match func(fullMethod string) bool

	// Optional lets calls without an idempotency-key through, unprotected;
	// otherwise they get InvalidArgument. Default: false (the key is
	// required).
	Optional bool

	// Scope returns the caller a call comes from, such as an account ID from
	// your authentication interceptor (which must run before this one):
	// equal keys from different callers are different records, so one can
	// never see, block or replay another's. It is hashed into the record's
	// name, never stored. An error answers Unauthenticated (a status error
	// is answered as it is); an empty scope answers Internal. Default:
	// DefaultScope, a hash of the credential the call presents, refusing
	// calls that present none; SharedScope opts into one scope for all.
	Scope func(ctx context.Context) (string, error)

	// Fingerprint returns what identifies the request, for the check that a
	// key is not reused for another request (FailedPrecondition). An error
	// answers Internal before anything is claimed. Default:
	// DefaultFingerprint, the full method name and the request's
	// deterministic protobuf encoding.
	Fingerprint func(ctx context.Context, fullMethod string, req any) (string, error)

	// Final reports whether a call that ended with code is finished: its
	// outcome is stored and replayed to every retry. For the other codes the
	// key is released, so a retry with the same key runs the handler again.
	// A handler that panics releases the key, and one stopped by
	// Shutdown, MaxDuration or a lost lease without an outcome always keeps
	// its record for the retry to take over, even if it then panics. An error that is not a status
	// error counts as Unknown. Default: DefaultFinal (OK, InvalidArgument,
	// NotFound, AlreadyExists, PermissionDenied, FailedPrecondition,
	// OutOfRange, Unauthenticated).
	Final func(code codes.Code) bool

	// Retention, if set, is how long the outcomes of the methods this
	// interceptor protects are kept and replayed, in place of the store's
	// Options.Retention (give methods that need another their own
	// interceptor, with Match). A retry after it runs the handler again.
	// The lease stays the store's. It must exceed the store's Lease and
	// MaxDuration: UnaryServerInterceptor panics otherwise
	// (redisstore.Store.ValidateRetention says why). Default: 0 (the
	// store's).
	Retention time.Duration

	// RetryAfter is the delay the Aborted (in progress) and Unavailable
	// (Redis unreachable) answers ask for, in a google.rpc.RetryInfo detail
	// and in the grpc-retry-pushback-ms trailer that grpc-go's retry policy
	// follows. Keep it near the handler's usual run time, not the lease.
	// Default: 1s.
	RetryAfter time.Duration

	// Wait makes a duplicate of a running call wait up to this long for the
	// first one to finish and then answer with its replay, instead of
	// Aborted at once (redisstore.Store.Await). A caller's deadline ends the
	// wait sooner. Default: 0 (Aborted at once).
	Wait time.Duration

	// Timeout bounds each call to Redis before the handler runs; a claim that
	// fails or times out answers Unavailable (or runs unprotected with
	// FailOpen). Storing the outcome after the handler ran keeps trying for
	// up to the longer of Timeout and the store's lease, since the side
	// effect has happened. Default: 2s.
	Timeout time.Duration

	// FailOpen runs the handler without protection when Redis cannot be
	// reached (a network error or a timeout), instead of answering
	// Unavailable. Retries may then run it twice. An answer from Redis (a
	// replication shortfall, an error reply) is never a reason to run
	// unprotected, nor is the store's refusal of a Redis that may evict or
	// does not persist (RequireNoEviction, RequirePersistence). Default:
	// false (fail closed).
	FailOpen bool

	// Shutdown, when done, starts a graceful stop, in this order. New
	// protected calls are refused with Unavailable (reason SHUTTING_DOWN,
	// with RetryInfo and the pushback trailer) before anything is claimed,
	// so that their retries go to another instance. Handlers still running
	// get ShutdownGrace to finish and store their outcomes as usual. Then
	// the context of each one still running is cancelled with cause
	// ErrShutdown, and its record is kept with only its lease ended, so
	// that its retry, on another instance, takes it over at once as the
	// next attempt, from its last checkpoint. Pass a context your server
	// cancels when it begins to stop (on SIGTERM), before
	// grpc.Server.GracefulStop, and give GracefulStop (which waits for the
	// running calls) a bound above ShutdownGrace plus the longer of Timeout
	// and the store's lease, the time a cut-off run takes to end its lease,
	// before falling back to Stop. A handler's context is otherwise
	// detached from the caller's: a caller that gives up does not stop the
	// run. Default: nil (only a lost lease or the store's MaxDuration
	// cancel it).
	Shutdown context.Context

	// ShutdownGrace is how long handlers still running when Shutdown is
	// done may go on before their contexts are cancelled. Keep it below the
	// time your platform waits after SIGTERM, less the time to end the
	// cut-off runs' leases (see Shutdown). A negative value cancels them at
	// once. Default: 5s.
	ShutdownGrace time.Duration

	// Types resolves the type of a stored response message by its full name,
	// to replay it. Default: protoregistry.GlobalTypes, where every
	// generated message and well-known type registers itself.
	Types protoregistry.MessageTypeResolver

	// Logger receives what the caller is not told, such as an outcome that
	// could not be stored. Default: slog.Default().
	Logger *slog.Logger
}

// withDefaults returns o with every zero field set to its default; it
// panics on a negative duration (but ShutdownGrace), a programming error.
func (o Options) withDefaults() Options {
	if o.Scope == nil {
		o.Scope = DefaultScope
	}
	if o.Fingerprint == nil {
		o.Fingerprint = DefaultFingerprint
	}
	if o.Final == nil {
		o.Final = DefaultFinal
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Types == nil {
		o.Types = protoregistry.GlobalTypes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = 5 * time.Second
	}
	if o.RetryAfter < 0 || o.Wait < 0 || o.Timeout < 0 {
		panic("grpcmw: negative duration in Options")
	}
	return o
}

var (
	// ErrNoCredential is returned by DefaultScope for a call that presents
	// no credential it knows. The interceptor answers it with
	// Unauthenticated (reason SCOPE_REQUIRED).
	ErrNoCredential = errors.New("grpcmw: the call presents no credential the default scope knows (authorization or x-api-key metadata, or a TLS client certificate)")

	// ErrNotProtected is returned by Checkpoint for a call that the
	// interceptor let through without a lease (not matched, an optional key
	// absent, or FailOpen with Redis down).
	ErrNotProtected = errors.New("grpcmw: call not protected by the idempotency interceptor")

	// ErrShutdown is the cause of the cancellation a handler's context sees
	// when it is still running Options.ShutdownGrace after Options.Shutdown
	// is done.
	ErrShutdown = errors.New("grpcmw: server shutting down")
)

// DefaultScope is the default Options.Scope. It derives the caller from the
// credential the call presents: a hash of its authorization metadata, or
// failing that of its x-api-key metadata, or failing that of the verified
// TLS client certificate; no credential is stored. A call with none fails
// with ErrNoCredential. Like its HTTP twin it suits long-lived credentials
// only: a bearer token refreshed between two tries of one call puts them in
// different scopes, and the call runs twice. Set Options.Scope to your
// authenticated caller instead.
func DefaultScope(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, k := range [...]string{"authorization", "x-api-key"} {
		if vs := md.Get(k); len(vs) > 0 {
			h := sha256.New()
			h.Write([]byte(k))
			for _, v := range vs {
				h.Write([]byte{0})
				h.Write([]byte(v))
			}
			return "cred:" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:18]), nil
		}
	}
	if cert := clientCert(ctx); cert != nil {
		sum := sha256.Sum256(cert.Raw)
		return "cert:" + base64.RawURLEncoding.EncodeToString(sum[:18]), nil
	}
	return "", ErrNoCredential
}

// clientCert returns the TLS client certificate the peer presented and the
// server verified, or nil.
func clientCert(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	tls, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(tls.State.VerifiedChains) == 0 || len(tls.State.PeerCertificates) == 0 {
		return nil
	}
	return tls.State.PeerCertificates[0]
}

// SharedScope returns an Options.Scope that puts every caller in the scope
// name: whoever sends a key gets its outcome. Use it only where there are no
// callers to keep apart. It panics if name is empty.
func SharedScope(name string) func(context.Context) (string, error) {
	if name == "" {
		panic("grpcmw: SharedScope with an empty name")
	}
	return func(context.Context) (string, error) { return name, nil }
}

// DefaultFingerprint is the default Options.Fingerprint: the first 16 bytes
// of SHA-256 over the full method name and the request's deterministic
// protobuf encoding (proto.MarshalOptions{Deterministic: true}). It fails
// for a request that is not a proto.Message (a custom codec's): set
// Options.Fingerprint then.
//
// Deterministic is not canonical: the same message may encode to other
// bytes in another language, another version of the protobuf runtime, or
// with unknown fields, so a retry sent by another client implementation may
// be taken for another request (FailedPrecondition), never the other way
// round. Clients that retry through their own library (grpc-go's retry
// policy, a retry interceptor) resend the bytes they sent.
func DefaultFingerprint(_ context.Context, fullMethod string, req any) (string, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return "", fmt.Errorf("grpcmw: the request is a %T, not a proto.Message: set Options.Fingerprint", req)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("grpcmw: fingerprint: %w", err)
	}
	h := sha256.New()
	h.Write([]byte(fullMethod))
	h.Write([]byte{0})
	h.Write(b)
	return string(h.Sum(nil)[:16]), nil
}

// DefaultFinal is the default Options.Final: OK and the codes that say the
// same request would fail the same way again (InvalidArgument, NotFound,
// AlreadyExists, PermissionDenied, FailedPrecondition, OutOfRange,
// Unauthenticated) are the call's outcome. The codes that say "try again"
// (Unavailable, ResourceExhausted, Aborted, DeadlineExceeded, Canceled),
// the server's failures (Internal, Unknown, DataLoss) and Unimplemented are
// not.
func DefaultFinal(code codes.Code) bool {
	switch code {
	case codes.OK, codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.FailedPrecondition, codes.OutOfRange, codes.Unauthenticated:
		return true
	}
	return false
}

// Methods returns an Options.Match (or ClientOptions.Match) that picks the
// methods named, by their full names ("/payments.v1.Payments/Charge").
func Methods(fullMethods ...string) func(fullMethod string) bool {
	set := make(map[string]bool, len(fullMethods))
	for _, m := range fullMethods {
		set[m] = true
	}
	return func(fullMethod string) bool { return set[fullMethod] }
}
