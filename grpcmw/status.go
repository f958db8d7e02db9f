package grpcmw

import (
	"context"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail that every
// answer the interceptor makes itself carries, with one of the Reason
// constants: a stable name per case, as the HTTP middleware's problem types.
const ErrorDomain = "idemkey"

// The reasons of the interceptor's own answers (ErrorInfo.Reason). They are
// a public contract: clients may branch on them.
const (
	// ReasonKeyMissing: InvalidArgument, the method requires an
	// idempotency-key and the call has none.
	ReasonKeyMissing = "KEY_MISSING"
	// ReasonKeyMalformed: InvalidArgument, the key breaks the rules (empty,
	// too long, not visible ASCII, sent more than once).
	ReasonKeyMalformed = "KEY_MALFORMED"
	// ReasonCallerUnknown: Unauthenticated, Options.Scope failed.
	ReasonCallerUnknown = "CALLER_UNKNOWN"
	// ReasonScopeRequired: Unauthenticated, the default scope found no
	// credential to keep callers apart.
	ReasonScopeRequired = "SCOPE_REQUIRED"
	// ReasonScopeInvalid: Internal, Options.Scope returned an empty scope or
	// one over 1 KiB.
	ReasonScopeInvalid = "SCOPE_INVALID"
	// ReasonFingerprintFailed: Internal, Options.Fingerprint failed.
	ReasonFingerprintFailed = "FINGERPRINT_FAILED"
	// ReasonInProgress: Aborted with RetryInfo, a call with the key is
	// running; retry after the delay with the same key.
	ReasonInProgress = "REQUEST_IN_PROGRESS"
	// ReasonKeyReused: FailedPrecondition, the key was used for another
	// request; the original outcome stays.
	ReasonKeyReused = "KEY_REUSED"
	// ReasonResponseExpired: FailedPrecondition, the call ran but its
	// outcome expired and only its tombstone is left; it will not run again
	// with this key.
	ReasonResponseExpired = "RESPONSE_EXPIRED"
	// ReasonStoreUnavailable: Unavailable with RetryInfo, Redis could not be
	// reached; nothing ran.
	ReasonStoreUnavailable = "STORE_UNAVAILABLE"
	// ReasonShuttingDown: Unavailable with RetryInfo, the server is stopping
	// (Options.Shutdown is done) and takes no new calls; nothing was
	// claimed: retry, on another instance, with the same key.
	ReasonShuttingDown = "SHUTTING_DOWN"
	// ReasonStoreError: Internal, Redis answered with something the store
	// does not understand; nothing ran.
	ReasonStoreError = "STORE_ERROR"
	// ReasonStoredUnreadable: Internal, the stored outcome cannot be
	// replayed (its response type is not registered, or it is corrupt); it
	// is not run again.
	ReasonStoredUnreadable = "STORED_RESPONSE_UNREADABLE"
)

// reasons lists every Reason, for the test that the README documents them.
var reasons = []string{ReasonKeyMissing, ReasonKeyMalformed, ReasonCallerUnknown, ReasonScopeRequired,
	ReasonScopeInvalid, ReasonFingerprintFailed, ReasonInProgress, ReasonKeyReused, ReasonResponseExpired,
	ReasonStoreUnavailable, ReasonShuttingDown, ReasonStoreError, ReasonStoredUnreadable}

// pushbackTrailer is the trailer with which grpc-go's retry policy lets a
// server say when to retry, in milliseconds.
const pushbackTrailer = "grpc-retry-pushback-ms"

// answer builds the interceptor's own answer: code, msg and an ErrorInfo
// with reason; with retryAfter > 0, also a RetryInfo and the pushback
// trailer.
func answer(ctx context.Context, code codes.Code, reason, msg string, retryAfter time.Duration) error {
	st := status.New(code, msg)
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}}
	if retryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)})
		ms := (retryAfter + time.Millisecond - 1) / time.Millisecond
		_ = grpc.SetTrailer(ctx, metadata.Pairs(pushbackTrailer, strconv.FormatInt(int64(ms), 10)))
	}
	if d, err := st.WithDetails(details...); err == nil {
		st = d
	}
	return st.Err()
}
