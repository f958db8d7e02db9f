// Package mcpmwtest runs the idempotency checks of idemkeytest (and of
// "idemkey verify") against your own MCP server and your own count of its
// side effects, in go test: the list adapted to tools/call.
//
// Run takes a Config naming the server (an *mcp.Server, reached over the
// SDK's in-memory transport, or a Transport function for any transport), a
// guarded tool, its arguments and a function that counts the side effects
// the tool must make exactly once per call (emails, charges, tickets).
// Each check is a subtest:
//
//	missing-key    a call without a key is a JSON-RPC error (unless Config.OptionalKey)
//	malformed-key  a 300-character key and one with a tab are each a JSON-RPC error
//	concurrency    20 copies at once with one key: one run's side effects, one
//	               original result, the rest replays or in-progress tool errors
//	               with a retry delay (retried after it until final), every
//	               final result identical
//	replay         the same call again: the same result, marked
//	               _meta.idempotentReplayed: true, no side effect
//	mismatch       the same key with other arguments: a JSON-RPC error, no
//	               side effect, and the original call still replays
//	side-effects   the checks above made one run's side effects
//	lost-response  the kit drops the response to a fresh key's first call on
//	               the wire, after the tool ran, and calls again: the replay
//	               of the dropped result, one run's side effects
//	same-caller    the caller under another credential (Config.SameCaller, a
//	               refreshed token) with the first key gets the replay and
//	               runs nothing: a scope that follows the credential (the
//	               default scope's header hash) fails it
//	scope          another caller (Config.OtherCaller) with the same key never
//	               gets the first caller's result, and runs on its own
//	crash-resume   a fresh key's first attempt, crashed by Config.Crash after
//	               its checkpoint, gets no result, and the retry completes the
//	               call with one run's side effects, the crashed attempt's
//	               included
//	ttl            every key the store wrote into Config.Redis has a TTL
//
// "One run's side effects" is Config.SideEffectsPerRun, 1 by default.
//
// The package uses the standard testing package only: it adds no test
// framework to your dependencies.
package mcpmwtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/idemclient"
	"github.com/idemkey/idemkey/mcpmw"
)

// Config describes the tool under test. Server (or Connect), Tool,
// Arguments and SideEffects are required; every other field's zero value
// takes its default or skips the check that needs it.
type Config struct {
	// Server is the MCP server under test, with mcpmw.New among its
	// receiving middleware; the kit connects to it over the SDK's in-memory
	// transport, each caller as a client whose Implementation.Name is the
	// caller's name (Caller, SameCaller, OtherCaller), which is all that
	// transport carries. Set Transport instead to reach it another way.
	Server *mcp.Server

	// Transport, if set, returns the transport to the server under test for
	// caller (Caller, SameCaller or OtherCaller): the streamable HTTP
	// transport with the caller's credential, say. The kit connects a
	// client named after the caller over it, through a wrapper of its
	// connection that lets the lost-response check drop a response, and
	// closes the sessions.
	Transport func(ctx context.Context, caller string) (mcp.Transport, error)

	// Caller is the name of the caller the checks call as. Default:
	// "alice".
	Caller string

	// SameCaller is Caller under another credential, as an agent presents
	// after refreshing its bearer token, for the same-caller check: the
	// same key as SameCaller must get Caller's result replayed and run
	// nothing. A server whose scope follows the credential fails it:
	// mcpmw.DefaultScope hashes the Authorization header of a call without
	// a verified token, so set mcpmw's Options.Scope to the authenticated
	// caller (a user or account ID). Default: "", and the check is skipped.
	SameCaller string

	// OtherCaller is another caller, for the scope check: the same key as
	// OtherCaller must never get Caller's result, and must run for it.
	// Default: "", and the scope check is skipped.
	OtherCaller string

	// Tool is the guarded tool's name. Required.
	Tool string

	// Arguments are every call's arguments. Required.
	Arguments map[string]any

	// OtherArguments are other arguments for the mismatch check. Default:
	// Arguments with one value changed (the first string, in the order of
	// the names, gets "-other" appended; else the first number plus one);
	// the check is skipped when there is none to change.
	OtherArguments map[string]any

	// SideEffects counts what the tool must do exactly once per call. It
	// is called between the checks, never while a call runs. Required.
	SideEffects func() int

	// SideEffectsPerRun is how far one run of the tool moves SideEffects:
	// new(0) for an outcome that makes none (a declined card, an isError
	// result stored and replayed: no payment), 2 for a counter of charges
	// and emails together. Every check then wants that many per run, and
	// none for a replay or a refusal. Default (nil): 1.
	SideEffectsPerRun *int

	// Crash, when set, enables the crash-resume check: it is called with
	// the params._meta of the first attempt of a fresh key, before it is
	// sent, to set a member that makes the tool crash part-way, as a dying
	// process would: the tool, seeing it, checkpoints its side effect
	// (mcpmw.Checkpoint) and then panics. Mark the attempt in _meta, not in
	// the arguments: the arguments are fingerprinted, and the retry,
	// without the mark, would be refused as a reuse of the key. The
	// crashed attempt must get no result, and the retry (without the mark)
	// must complete the call with one run's side effects in all: the tool
	// finds its checkpoint with mcpmw.RecoveryPoint (mcpmw.Attempt is 2)
	// and resumes from it instead of doing the side effect again.
	//
	// An in-process crash stands in for a dead process: mcpmw recovers the
	// panic, answers TOOL_PANICKED and releases the key, and a record with
	// a checkpoint keeps it, so the retry takes it over at once; a process
	// that died leaves its lease to run out first, and the retry then
	// takes over the same way. Crash with panic, not runtime.Goexit: the
	// SDK would never answer the request whose handler exited. (Without
	// mcpmw in front of the tool, the panic ends the test: the SDK recovers
	// none.) Default: nil, and the check is skipped.
	Crash func(meta mcp.Meta)

	// OptionalKey says the server runs calls without a key (mcpmw's
	// Options.Optional); the missing-key check is then skipped.
	OptionalKey bool

	// Parallel is how many copies of one call the concurrency check sends
	// at once, 2 to 1000. Default: 20.
	Parallel int

	// Timeout bounds each call, its in-progress retries included.
	// Default: 10s.
	Timeout time.Duration

	// Redis, the Redis the server's store writes to, enables the ttl check:
	// once the other checks are done, every key under Prefix must have a
	// TTL. Give the test a Redis of its own. Default: nil (skipped).
	Redis redis.UniversalClient

	// Prefix is the store's redisstore.Options.Prefix. Default: "idem:".
	Prefix string
}

// tester is what a run needs of a test: *testing.T, or a recorder in the
// kit's own tests.
type tester interface {
	Helper()
	Context() context.Context
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Run(name string, f func(t tester)) bool
}

type testT struct{ *testing.T }

func (t testT) Run(name string, f func(t tester)) bool {
	return t.T.Run(name, func(t *testing.T) { f(testT{t}) })
}

// Run runs the checks against the server cfg names, each as a subtest of
// t named after it: missing-key, malformed-key, concurrency, replay,
// mismatch, side-effects, lost-response, same-caller, scope, crash-resume
// and ttl. A failed check says what the server did; a check whose Config
// field is unset is skipped. Run fails t at once for a Config without
// Server or Transport, Tool, Arguments or SideEffects. Every check gets a
// fresh key (a UUIDv7).
func Run(t *testing.T, cfg Config) {
	t.Helper()
	run(testT{t}, cfg)
}

func run(t tester, cfg Config) {
	t.Helper()
	if err := cfg.check(); err != nil {
		t.Fatalf("mcpmwtest: %v", err)
		return
	}
	k := &kit{cfg: cfg, sessions: map[string]*mcp.ClientSession{}, perRun: 1}
	if cfg.SideEffectsPerRun != nil {
		k.perRun = *cfg.SideEffectsPerRun
	}
	defer k.close()
	ctx := t.Context()
	for _, c := range []struct {
		name string
		f    func(ctx context.Context, t tester)
	}{
		{"missing-key", k.missingKey},
		{"malformed-key", k.malformedKey},
		{"concurrency", k.concurrency},
		{"replay", k.replay},
		{"mismatch", k.mismatch},
		{"side-effects", k.sideEffects},
		{"lost-response", k.lostResponse},
		{"same-caller", k.sameCaller},
		{"scope", k.scope},
		{"crash-resume", k.crashResume},
		{"ttl", k.ttl},
	} {
		t.Run(c.name, func(t tester) { t.Helper(); c.f(ctx, t) })
	}
}

func (cfg *Config) check() error {
	switch {
	case cfg.Server == nil && cfg.Transport == nil:
		return errors.New("Config.Server or Config.Transport is required")
	case cfg.SideEffectsPerRun != nil && *cfg.SideEffectsPerRun < 0:
		return fmt.Errorf("Config.SideEffectsPerRun must not be negative, got %d", *cfg.SideEffectsPerRun)
	case cfg.Tool == "":
		return errors.New("Config.Tool is required")
	case cfg.Arguments == nil:
		return errors.New("Config.Arguments is required")
	case cfg.SideEffects == nil:
		return errors.New("Config.SideEffects is required: the tool's own count of what it must do once per call")
	case cfg.Parallel != 0 && (cfg.Parallel < 2 || cfg.Parallel > 1000):
		return fmt.Errorf("Config.Parallel must be 2 to 1000, got %d", cfg.Parallel)
	case cfg.Timeout < 0:
		return fmt.Errorf("Config.Timeout must not be negative, got %s", cfg.Timeout)
	}
	if cfg.Caller == "" {
		cfg.Caller = "alice"
	}
	if cfg.Caller == cfg.OtherCaller {
		return errors.New("Config.OtherCaller must differ from Config.Caller")
	}
	if cfg.SameCaller != "" && (cfg.SameCaller == cfg.Caller || cfg.SameCaller == cfg.OtherCaller) {
		return errors.New("Config.SameCaller must differ from Config.Caller and Config.OtherCaller: it is the caller's other credential")
	}
	if cfg.Parallel == 0 {
		cfg.Parallel = 20
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "idem:"
	}
	if cfg.OtherArguments == nil {
		cfg.OtherArguments = changeOne(cfg.Arguments)
	}
	return nil
}

// changeOne returns args with one value changed, or nil.
func changeOne(args map[string]any) map[string]any {
	names := make([]string, 0, len(args))
	for n := range args {
		names = append(names, n)
	}
	slices.Sort(names)
	out := maps.Clone(args)
	for _, n := range names {
		if s, ok := args[n].(string); ok {
			out[n] = s + "-other"
			return out
		}
	}
	for _, n := range names {
		switch v := args[n].(type) {
		case float64:
			out[n] = v + 1
			return out
		case int:
			out[n] = v + 1
			return out
		case json.Number:
			out[n] = json.Number(string(v) + "1")
			return out
		}
	}
	return nil
}

// answer is one call's outcome, as the caller saw it.
type answer struct {
	res *mcp.CallToolResult
	err error
}

// describe says what an answer was, for a failed check.
func (a answer) describe() string {
	switch {
	case a.err != nil:
		return "error: " + a.err.Error()
	case a.res == nil:
		return "no result"
	}
	var parts []string
	if a.res.IsError {
		parts = append(parts, "isError")
	}
	if r := mcpmw.Reason(a.res, nil); r != "" {
		parts = append(parts, r)
	}
	if mcpmw.Replayed(a.res) {
		parts = append(parts, "replayed")
	}
	b, _ := json.Marshal(a.res.Content)
	s := string(b)
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return strings.TrimSpace(strings.Join(parts, ", ") + " content " + s)
}

// same reports whether two results are the same outcome: content,
// structured content and isError, the replay mark aside.
func same(a, b *mcp.CallToolResult) bool {
	if a == nil || b == nil {
		return a == b
	}
	ja, _ := json.Marshal([]any{a.Content, a.StructuredContent, a.IsError})
	jb, _ := json.Marshal([]any{b.Content, b.StructuredContent, b.IsError})
	return string(ja) == string(jb)
}

// newKey is a fresh key per check.
func newKey() string { return idemclient.NewKey() }
