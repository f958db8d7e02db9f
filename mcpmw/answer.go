package mcpmw

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The _meta members of the contract (SEP-3182's names).
const (
	// MetaKey is the member of a tools/call request's params._meta that
	// carries the idempotency key: a string of 1 to MaxKeyLen visible ASCII
	// characters, one per logical call, the same on every retry of it.
	MetaKey = "idempotencyKey"

	// MetaReplayed is the member of a result's _meta set to true when the
	// result is the stored outcome of an earlier run, not this call's.
	MetaReplayed = "idempotentReplayed"

	// MetaRetryAfter is the member of the _meta of the middleware's own
	// tool errors (in progress, shutting down, store unavailable) that
	// gives the delay to retry after, in milliseconds: nothing ran for this
	// call, and the same key is to be sent again.
	MetaRetryAfter = "retryAfterMs"

	// MetaReason is the member of the _meta of the middleware's own tool
	// errors that names the case: one of the Reason constants.
	MetaReason = "idempotencyReason"
)

// MaxKeyLen is the longest idempotency key accepted, in characters: the
// HTTP middleware's limit.
const MaxKeyLen = 255

// Capability is the name under which the middleware advertises itself in
// the server's experimental capabilities (initialize's result), SEP-3182's
// tools.idempotency: its value says where the key goes.
const Capability = "tools.idempotency"

// The reasons of the middleware's own answers: the "reason" of a JSON-RPC
// error's data, or _meta.idempotencyReason of a tool error. They are a
// public contract: clients may branch on them.
const (
	// ReasonKeyMissing: invalid params, the tool requires a key and the
	// call has none.
	ReasonKeyMissing = "KEY_MISSING"
	// ReasonKeyMalformed: invalid params, the key is not a string of 1 to
	// MaxKeyLen visible ASCII characters, or _meta and the key argument
	// give two keys.
	ReasonKeyMalformed = "KEY_MALFORMED"
	// ReasonArgumentsInvalid: invalid params, the arguments cannot be
	// fingerprinted (a member named twice, nested too deeply).
	ReasonArgumentsInvalid = "ARGUMENTS_INVALID"
	// ReasonCallerUnknown: invalid request, Options.Scope failed.
	ReasonCallerUnknown = "CALLER_UNKNOWN"
	// ReasonScopeRequired: the default scope cannot keep callers apart:
	// invalid request when the call presents no credential; internal error
	// when its verified token has no user ID (set Options.Scope).
	ReasonScopeRequired = "SCOPE_REQUIRED"
	// ReasonScopeInvalid: internal error, Options.Scope returned an empty
	// scope or one over 1 KiB.
	ReasonScopeInvalid = "SCOPE_INVALID"
	// ReasonInProgress: a tool error with _meta.retryAfterMs, a call with
	// the key is running; retry after the delay with the same key.
	ReasonInProgress = "REQUEST_IN_PROGRESS"
	// ReasonKeyReused: invalid params, the key was used for a call to the
	// same tool with other arguments (the fingerprint differs; a key on
	// another tool is another record, never a reuse); the original outcome
	// stays.
	ReasonKeyReused = "KEY_REUSED"
	// ReasonResponseExpired: invalid params, the call ran but its outcome
	// expired and only its tombstone is left; it will not run again with
	// this key.
	ReasonResponseExpired = "RESPONSE_EXPIRED"
	// ReasonStoreUnavailable: a tool error with _meta.retryAfterMs, Redis
	// could not be reached; nothing ran.
	ReasonStoreUnavailable = "STORE_UNAVAILABLE"
	// ReasonShuttingDown: a tool error with _meta.retryAfterMs, the server
	// is stopping (Options.Shutdown is done); nothing was claimed.
	ReasonShuttingDown = "SHUTTING_DOWN"
	// ReasonStoreError: internal error, Redis answered with something the
	// store does not understand, or the store refused the call as invalid
	// (the message says why); nothing ran.
	ReasonStoreError = "STORE_ERROR"
	// ReasonStoredUnreadable: internal error, the stored outcome cannot be
	// replayed; the tool is not run again.
	ReasonStoredUnreadable = "STORED_RESPONSE_UNREADABLE"
	// ReasonResultTooLarge: a tool error marked _meta.idempotentReplayed,
	// without a retry delay: the call with the key ran, but its result was
	// over Options.MaxResultBytes and was not stored; the call will not run
	// again with this key.
	ReasonResultTooLarge = "RESULT_TOO_LARGE"
	// ReasonToolPanicked: internal error, the tool panicked; the key was
	// released, so a retry with it runs the tool again.
	ReasonToolPanicked = "TOOL_PANICKED"
)

// reasons lists every Reason, for the test that the README documents them.
var reasons = []string{ReasonKeyMissing, ReasonKeyMalformed, ReasonArgumentsInvalid, ReasonCallerUnknown,
	ReasonScopeRequired, ReasonScopeInvalid, ReasonInProgress, ReasonKeyReused, ReasonResponseExpired,
	ReasonStoreUnavailable, ReasonShuttingDown, ReasonStoreError, ReasonStoredUnreadable, ReasonResultTooLarge, ReasonToolPanicked}

// ErrorData is the data of the JSON-RPC errors the middleware answers with:
// {"reason": "KEY_REUSED"}.
type ErrorData struct {
	// Reason is one of the Reason constants.
	Reason string `json:"reason"`
}

// rpcError builds the middleware's own JSON-RPC error.
func rpcError(code int64, reason, msg string) *jsonrpc.Error {
	data, _ := json.Marshal(ErrorData{Reason: reason})
	return &jsonrpc.Error{Code: code, Message: "idemkey: " + msg, Data: data}
}

// retryLater builds the middleware's own tool error for a call that did not
// run and is to be sent again, with the same key, after retryAfter: the
// model reads the text, a client (NewClient) the _meta.
func retryLater(reason, msg string, retryAfter time.Duration) *mcp.CallToolResult {
	ms := int64((retryAfter + time.Millisecond - 1) / time.Millisecond)
	return &mcp.CallToolResult{
		Meta:    mcp.Meta{MetaReason: reason, MetaRetryAfter: ms},
		Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("idemkey: %s; nothing ran for this call: retry in %d ms with the same idempotency key", msg, ms)}},
		IsError: true,
	}
}

// RetryAfter reports whether res is one of the middleware's own tool
// errors that ask for the call to be sent again with the same key (in
// progress, shutting down, store unavailable), and after how long.
func RetryAfter(res *mcp.CallToolResult) (time.Duration, bool) {
	if res == nil || !res.IsError {
		return 0, false
	}
	if _, ok := res.Meta[MetaReason].(string); !ok {
		return 0, false
	}
	var ms int64
	switch v := res.Meta[MetaRetryAfter].(type) {
	case float64: // as a client decodes it
		ms = int64(v)
	case int64: // as the middleware builds it
		ms = v
	default:
		return 0, false
	}
	return time.Duration(max(ms, 0)) * time.Millisecond, true
}

// Replayed reports whether res is the stored outcome of an earlier run
// (_meta.idempotentReplayed: true).
func Replayed(res *mcp.CallToolResult) bool {
	if res == nil {
		return false
	}
	b, _ := res.Meta[MetaReplayed].(bool)
	return b
}

// Reason returns the reason of one of the middleware's own answers: the
// data of a JSON-RPC error err, or else the _meta of a tool error res; ""
// for anything else.
func Reason(res *mcp.CallToolResult, err error) string {
	if err != nil {
		var we *jsonrpc.Error
		if !errors.As(err, &we) || len(we.Data) == 0 {
			return ""
		}
		var d ErrorData
		if json.Unmarshal(we.Data, &d) != nil {
			return ""
		}
		return d.Reason
	}
	if res != nil && res.IsError {
		s, _ := res.Meta[MetaReason].(string)
		return s
	}
	return ""
}

// parseKey checks a key: a JSON string of 1 to MaxKeyLen visible ASCII
// characters (the HTTP header's bare token). On failure it returns the
// reason, in words a client can act on.
func parseKey(v any) (key, reason string) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Sprintf("the key is a JSON %s, not a string", jsonKind(v))
	}
	switch {
	case s == "":
		return "", "the key is empty"
	case len(s) > MaxKeyLen:
		return "", fmt.Sprintf("the key is %d bytes long; the limit is %d", len(s), MaxKeyLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return "", fmt.Sprintf("the key has a character other than visible ASCII at byte %d", i+1)
		}
	}
	return s, ""
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64, json.Number, int, int64:
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// Advertised reports whether a server's capabilities (from
// ClientSession.InitializeResult) carry the experimental capability
// tools.idempotency, and returns its settings: metaKey, and keyArgument,
// keyRequired and tools where the server set them.
func Advertised(caps *mcp.ServerCapabilities) (settings map[string]any, ok bool) {
	if caps == nil {
		return nil, false
	}
	settings, ok = caps.Experimental[Capability].(map[string]any)
	return settings, ok
}
