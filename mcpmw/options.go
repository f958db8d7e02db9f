package mcpmw

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Options configures New. The zero value gives the defaults.
type Options struct {
	// Tools names the tools whose calls are guarded; calls to the others
	// pass through untouched. Default: empty, which guards every tool the
	// server does not annotate readOnlyHint: true (the middleware reads the
	// annotations with a tools/list through the handlers below it, on each
	// call; name the tools to spare it). That default fails closed: a tool
	// the tools/list does not show (hidden by a middleware below, or not
	// there at all), and every tool while the tools/list fails, is guarded,
	// never taken for read-only; a call to an unknown tool then needs a key
	// before the SDK answers that there is no such tool.
	Tools []string

	// KeyArgument, if set, names a top-level tool argument that carries the
	// key for clients that cannot set params._meta.idempotencyKey: the
	// tool's input schema declares it (a string), so that the model fills
	// it in. It is left out of the fingerprint. A call with both must give
	// the same key in each. Default: "" (only _meta.idempotencyKey).
	KeyArgument string

	// Optional lets guarded calls without a key through, unguarded;
	// otherwise they are refused with a JSON-RPC invalid-params error
	// (reason KEY_MISSING). With Optional, a key that is null or the empty
	// string (in _meta or the key argument, as a model fills in an
	// argument it has no value for) counts as absent: the call runs
	// unguarded. Without it, such a key is refused as malformed
	// (KEY_MALFORMED). Default: false (the key is required).
	Optional bool

	// Scope returns the caller a call comes from, such as the user of the
	// session's verified token (req.Extra.TokenInfo) or a tenant: equal keys
	// from different callers are different records, so one can never see,
	// block or replay another's. It is hashed into the record's name, never
	// stored; the tool's name is added to it, so one key on two tools never
	// collides. An error refuses the call (CALLER_UNKNOWN; a *jsonrpc.Error
	// is answered as it is), and so does an empty scope or one over 1 KiB
	// (SCOPE_INVALID). Default: DefaultScope, which refuses calls that
	// present no credential; SharedScope opts into one scope for all.
	Scope func(ctx context.Context, req *mcp.CallToolRequest) (string, error)

	// Ignore lists tool arguments left out of the fingerprint, as dotted
	// paths from the top-level arguments object ("sent_at",
	// "meta.client_time"), for fields that legitimately differ between
	// tries of one call (a timestamp the agent adds). Paths do not go into
	// arrays. The list applies to every guarded tool: a path named for one
	// tool is left out of the fingerprint of every tool that has an
	// argument there, so name only what differs between tries wherever it
	// appears (a path that decides what a call does must not be in it).
	// Default: none.
	Ignore []string

	// Wait makes a duplicate of a running call wait up to this long for the
	// first one to finish and answer with its replay, instead of the
	// in-progress tool error at once. The caller's cancellation ends the
	// wait sooner. Default: 0 (answer at once).
	Wait time.Duration

	// RetryAfter is the delay the in-progress, shutting-down and
	// store-unavailable tool errors ask for (their text and
	// _meta.retryAfterMs). Keep it near the tool's usual run time, not the
	// lease. Default: 1s.
	RetryAfter time.Duration

	// Retention, if set, is how long the outcomes of the tools this
	// middleware guards are kept and replayed, in place of the store's
	// Options.Retention. It must exceed the store's Lease and MaxDuration:
	// New panics otherwise. Default: 0 (the store's).
	Retention time.Duration

	// Timeout bounds each call to Redis before the tool runs; a claim that
	// fails or times out answers with the store-unavailable tool error.
	// Storing the outcome after the tool ran keeps trying for up to the
	// longer of Timeout and the store's lease. Default: 2s.
	Timeout time.Duration

	// Shutdown, when done, starts a graceful stop: new guarded calls get
	// the shutting-down tool error before anything is claimed (their
	// retries go to another instance); tools still running get
	// ShutdownGrace to finish and store their outcomes; then their contexts
	// are cancelled with cause ErrShutdown and their records kept with only
	// the lease ended, so that the retry takes them over at once as the
	// next attempt. Default: nil (a tool's context ends only by a lost lease
	// or the store's MaxDuration: it is detached from the caller's).
	Shutdown context.Context

	// ShutdownGrace is how long tools still running when Shutdown is done
	// may go on before their contexts are cancelled; a negative value
	// cancels them at once. Default: 5s.
	ShutdownGrace time.Duration

	// MaxResultBytes is the largest tool result, in bytes of its JSON, that
	// is stored for replay. A larger result reaches the caller of the run
	// that made it, but is not stored: the record keeps only that the call
	// ran, and every later call with its key gets a tool error (isError:
	// true, marked _meta.idempotentReplayed) whose
	// _meta.idempotencyReason is RESULT_TOO_LARGE; the call never runs
	// again with that key. Default: 1 MiB.
	MaxResultBytes int

	// Logger receives what the caller is not told, such as an outcome that
	// could not be stored or a tool that panicked. Default: slog.Default().
	Logger *slog.Logger
}

// DefaultMaxResultBytes is the default Options.MaxResultBytes: 1 MiB, the
// HTTP middleware's default MaxResponseBytes.
const DefaultMaxResultBytes = 1 << 20

// withDefaults returns o with every zero field set to its default; it
// panics on a negative duration (but ShutdownGrace) or MaxResultBytes, a
// programming error.
func (o Options) withDefaults() Options {
	if o.Scope == nil {
		o.Scope = DefaultScope
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxResultBytes == 0 {
		o.MaxResultBytes = DefaultMaxResultBytes
	}
	if o.MaxResultBytes < 0 {
		panic("mcpmw: negative Options.MaxResultBytes")
	}
	if o.RetryAfter < 0 || o.Wait < 0 || o.Timeout < 0 || o.Retention < 0 {
		panic("mcpmw: negative duration in Options")
	}
	return o
}

var (
	// ErrNoCredential is returned by DefaultScope for a call that presents
	// no credential it knows. The middleware refuses the call (reason
	// SCOPE_REQUIRED).
	ErrNoCredential = errors.New("mcpmw: the call presents no credential the default scope knows (a verified token, or an Authorization or X-API-Key header)")

	// ErrNoUserID is returned by DefaultScope for a call whose verified
	// token (req.Extra.TokenInfo) carries no user ID: the token says the
	// caller is authenticated, but not who it is, and hashing the token
	// instead would put one caller in a new scope at each token refresh
	// (running a retry again) or, for a token shared by many, put them
	// together. The middleware refuses the call (reason SCOPE_REQUIRED)
	// and logs a WARN once: set Options.Scope to your caller (say, from
	// the token's Extra), or have your TokenVerifier fill in UserID.
	ErrNoUserID = errors.New("mcpmw: the call's verified token has no user ID, so the default scope cannot tell its caller; set mcpmw Options.Scope to the authenticated caller, or fill in TokenInfo.UserID in the TokenVerifier")

	// ErrNotProtected is returned by Checkpoint for a call the middleware
	// let through without a lease (a tool it does not guard, or an
	// optional key absent).
	ErrNotProtected = errors.New("mcpmw: call not protected by the idempotency middleware")

	// ErrShutdown is the cause of the cancellation a tool's context sees
	// when it is still running Options.ShutdownGrace after Options.Shutdown
	// is done.
	ErrShutdown = errors.New("mcpmw: server shutting down")
)

// DefaultScope is the default Options.Scope. It derives the caller from
// what the call presents: the user ID of its verified token
// (req.Extra.TokenInfo.UserID, set by the SDK's auth.RequireBearerToken
// with a TokenVerifier that fills it), or, for a call without a verified
// token, a hash of its HTTP Authorization header, or failing that of its
// X-API-Key header; no credential is stored. A verified token without a
// user ID fails with ErrNoUserID (the token is never hashed in its
// place). A call with no credential (stdio, the in-memory transport, an
// HTTP server without authentication) fails with ErrNoCredential: set
// Options.Scope to your caller, or SharedScope for a server with one
// client. Like its HTTP twin, the header hash suits long-lived credentials
// only: a bearer token refreshed between two tries of one call puts them
// in different scopes, and the call runs twice.
func DefaultScope(_ context.Context, req *mcp.CallToolRequest) (string, error) {
	if req == nil || req.Extra == nil {
		return "", ErrNoCredential
	}
	if ti := req.Extra.TokenInfo; ti != nil {
		if ti.UserID == "" {
			return "", ErrNoUserID
		}
		return "user:" + ti.UserID, nil
	}
	for _, name := range [...]string{"Authorization", "X-Api-Key"} {
		if vs := req.Extra.Header.Values(name); len(vs) > 0 {
			h := sha256.New()
			h.Write([]byte(name))
			for _, v := range vs {
				h.Write([]byte{0})
				h.Write([]byte(v))
			}
			return "cred:" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:18]), nil
		}
	}
	return "", ErrNoCredential
}

// SharedScope returns an Options.Scope that puts every caller in the scope
// name: whoever sends a key gets its outcome. Use it only where there are
// no callers to keep apart, such as a stdio server that serves the one
// agent that started it. It panics if name is empty.
func SharedScope(name string) func(context.Context, *mcp.CallToolRequest) (string, error) {
	if name == "" {
		panic("mcpmw: SharedScope with an empty name")
	}
	return func(context.Context, *mcp.CallToolRequest) (string, error) { return name, nil }
}
