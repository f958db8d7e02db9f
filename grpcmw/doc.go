// Package grpcmw is idemkey for gRPC: the Idempotency-Key contract of the
// HTTP middleware for unary RPCs, server and client, on the same store and
// guarantees.
//
// # Server
//
// UnaryServerInterceptor runs each protected call once per (caller, key).
// The key is the idempotency-key metadata: one value, a bare token or an
// RFC 8941 string of 1 to 255 visible ASCII characters, the HTTP header's
// rule. The first call runs the handler and stores its outcome; a retry
// after it gets that outcome with header metadata idempotency-replayed:
// true; a retry while it runs gets Aborted with a google.rpc.RetryInfo (or,
// with Options.Wait, the replay once it finishes); another request under
// the same key gets FailedPrecondition; a call without a key gets
// InvalidArgument; and with Redis unreachable a call gets Unavailable with
// a RetryInfo (Options.FailOpen runs it unprotected instead). Every answer
// the interceptor makes itself carries a google.rpc.ErrorInfo with domain
// ErrorDomain and one of the Reason constants; the Aborted and Unavailable
// ones also carry the grpc-retry-pushback-ms trailer, which grpc-go's retry
// policy follows.
//
// What is stored: the response message (with the header and trailer
// metadata the handler set), or a status error whose code Options.Final
// accepts (by default InvalidArgument, NotFound, AlreadyExists,
// PermissionDenied, FailedPrecondition, OutOfRange, Unauthenticated),
// replayed with its code, message and details. The other codes, errors that
// are not status errors (Unknown) and panics release the key, so the retry
// runs the handler again. Final is the one list that is configurable. A run
// stopped by Options.Shutdown, the store's MaxDuration or a lost lease
// without an outcome keeps its record, whatever it then returns or throws
// (a panic too), and the retry takes it over as the next attempt (Attempt,
// RecoveryPoint). A run that lost its lease (paused past it) while another
// attempt took the key over cannot store its outcome (it is fenced), and
// its caller does not get it either: it gets Aborted REQUEST_IN_PROGRESS
// with a RetryInfo, as a duplicate in progress does, so that its retry
// gets the key's one outcome.
//
// Replaying needs the response's type: the stored outcome records the
// message's full name, and a replay resolves it in Options.Types
// (protoregistry.GlobalTypes by default), where every generated message
// and well-known type registers itself. So no service descriptor needs to
// be registered, and a hand-written grpc.ServiceDesc replays like a
// generated one; responses must be proto messages (the default codec).
//
// The handler runs on a context detached from the caller's cancellation and
// deadline (its values kept: metadata, peer, the transport stream) and
// supervised by the lease: a caller that gives up does not stop the run,
// whose outcome its retry gets. The context is cancelled only by a lost
// lease, the store's MaxDuration or, Options.ShutdownGrace after
// Options.Shutdown is done, a graceful stop (cause ErrShutdown; see
// Options.Shutdown for the order of events).
// Handlers find their key, attempt, derived keys for downstream providers
// and recovery points with Key, Attempt, DerivedKey, Checkpoint and
// RecoveryPoint.
//
// The scope keeps callers apart: Options.Scope returns your authenticated
// caller; the default, DefaultScope, hashes the credential the call
// presents and refuses a call with none (Unauthenticated, SCOPE_REQUIRED),
// never putting callers in a shared scope by accident. The fingerprint is
// the full method name and the request's deterministic protobuf encoding
// (DefaultFingerprint, which says why deterministic is not canonical);
// Options.Fingerprint replaces it.
//
// Streams are not supported: the package has no stream interceptor, and
// streaming calls pass through untouched.
//
// # Client
//
// UnaryClientInterceptor mints one key (a UUIDv7) per logical call that has
// none and keeps it on every retry of the call: grpc-go's retry policy
// retries below the interceptors and resends it, and a retry interceptor
// must come after this one in the chain. A caller's own key (WithKey, or
// the metadata set by hand) is never changed. With ClientOptions.MaxAttempts
// it retries Aborted and Unavailable itself, honouring RetryInfo, within a
// retry budget.
//
// # Hedging
//
// A hedging client (a service config's hedgingPolicy, in grpc-java or gRPC
// C++ and its wrappers) sends copies of a call while the first runs. A copy
// that meets the running call is answered Aborted (IN_PROGRESS), which the
// client takes as the call's answer unless ABORTED is non-fatal, and the
// caller sees an error for a call that succeeded. Either list it:
//
//	"hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.5s",
//	  "nonFatalStatusCodes": ["ABORTED", "UNAVAILABLE"]}
//
// or set Options.Wait on the server (longer than the handler takes), so a
// copy waits for the outcome and answers with its replay. grpc-go (v1.85)
// accepts a hedgingPolicy and sends no copies.
//
// The module requires the core module's release and imports only its
// public packages (redisstore, observe, idemclient), so grpc-go never
// enters the core's go.mod.
package grpcmw
