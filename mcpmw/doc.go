// Package mcpmw is idemkey for the Model Context Protocol: MCP tool calls
// that run once, for agents that retry. An agent whose tools/call timed out
// calls again, and a tool that sends an email, charges a card or opens a
// ticket would run twice; behind this middleware the retry gets the first
// run's result instead. It is built on the official Go SDK
// (github.com/modelcontextprotocol/go-sdk) and on the store and guarantees
// of the HTTP middleware.
//
// # Server
//
// New returns a receiving middleware (mcp.Server.AddReceivingMiddleware)
// that guards tools/call for the tools it is told to guard (Options.Tools;
// by default every tool not annotated readOnlyHint, failing closed: a tool
// tools/list does not show, and every tool while tools/list fails, is
// guarded). The key is
// params._meta.idempotencyKey (SEP-3182's name), or, for clients that
// cannot set _meta, the tool argument Options.KeyArgument names: a string
// of 1 to 255 visible ASCII characters. The record is per (caller, tool,
// key): Options.Scope names the caller (DefaultScope refuses calls that
// present no credential, and calls whose verified token has no user ID,
// never sharing a scope by accident; SharedScope opts in to one), and the
// tool's name is added to it, so one key on two tools never collides. The
// fingerprint is the tool's name and the canonical JSON of its arguments
// (package jsoncanon, as the HTTP middleware's bodies), less
// Options.Ignore, which applies to every guarded tool.
//
// The answers:
//
//   - The first call runs the tool and stores its CallToolResult (content,
//     structured content, isError, _meta) as the JSON bytes it encodes to;
//     a result with isError: true is stored too: the tool decided.
//   - A call after it gets those bytes again, member for member, with
//     _meta.idempotentReplayed: true added.
//   - A result over Options.MaxResultBytes (1 MiB) reaches its caller but
//     is not stored: a call after it gets a tool error marked replayed,
//     _meta.idempotencyReason RESULT_TOO_LARGE; the tool never runs again
//     with that key.
//   - A call while it runs gets a tool error (isError: true) saying so,
//     with _meta.idempotencyReason REQUEST_IN_PROGRESS and
//     _meta.retryAfterMs (Options.RetryAfter); with Options.Wait it waits
//     for the first run instead and gets the replay.
//   - The same key with other arguments gets a JSON-RPC invalid-params
//     error whose data's reason is KEY_REUSED; nothing runs.
//   - A call without a key gets a JSON-RPC invalid-params error
//     (KEY_MISSING), unless Options.Optional lets it through unguarded
//     (a null or empty key then counts as none).
//   - A Go error from the tool (returned by a ToolHandler, or wrapped by
//     mcp.AddTool into an isError result that keeps it), a result asking
//     for input, and a panic release the key: nothing is stored, and the
//     retry runs the tool again. The SDK recovers no panic, so the
//     middleware does, answering a JSON-RPC internal error
//     (TOOL_PANICKED).
//   - A run cut off by its context (Options.Shutdown, the store's
//     MaxDuration, a lost lease) that ends without a result, with a Go
//     error, an isError result or a panic keeps its record with only its
//     lease ended, as in Store.Do and the HTTP middleware: the retry takes
//     it over as attempt 2, with the last Checkpoint as its RecoveryPoint.
//
// The tool runs on a context detached from the caller's cancellation (an
// agent that times out does not stop the run, and its retry gets the
// result), keeping its values, and supervised by the lease. Tools find
// their Key, Attempt, DerivedKey (the key to hand an email or payment
// provider), Checkpoint and RecoveryPoint in it.
//
// The middleware advertises itself in the server's capabilities, as the
// experimental capability tools.idempotency (Capability), whose value says
// where the key goes (metaKey, keyArgument), whether it is required and
// which tools are guarded; Advertised reads it on the client.
//
// # Client
//
// NewClient returns a sending middleware (mcp.Client.AddSendingMiddleware)
// that gives each tool call without a key one, once per logical call, kept
// on every retry it makes (ClientOptions.MaxAttempts: after the server's
// retry delay, and after any error that is not the server's JSON-RPC
// answer, such as a transport failure or an AttemptTimeout). WithKey pins a
// key across calls, for an agent that sends a call again on its own; use
// its context for that one call only.
//
// # Testing
//
// Package mcpmwtest runs the idempotency checks of idemkeytest against
// your MCP server and your count of its side effects: a response lost on
// the wire, a refreshed credential, a crash resumed from its checkpoint
// among them.
//
// The module requires the core module's release and imports only its
// public packages (redisstore, observe, jsoncanon, idemclient), so the MCP
// SDK never enters the core's go.mod.
package mcpmw
