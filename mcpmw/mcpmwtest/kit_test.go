package mcpmwtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/mcpmw"
	"github.com/idemkey/idemkey/redisstore"
)

// mailer is a server with a send_email tool that counts its emails; guard
// puts mcpmw in front of it. A call whose _meta has "crash" sends its email,
// checkpoints it and panics; an attempt that finds the checkpoint answers
// with the email it names without sending another (unless rerun, a tool
// that does not resume). Each run also counts perRun-1 audit records.
type mailer struct {
	server *mcp.Server
	sent   atomic.Int64
	audits atomic.Int64
	rerun  bool
	perRun int64
}

type emailIn struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func newMailer(t *testing.T, store *redisstore.Store, opts *mcpmw.Options) *mailer {
	m := &mailer{server: mcp.NewServer(&mcp.Implementation{Name: "mailer", Version: "v1"}, nil), perRun: 1}
	mcp.AddTool(m.server, &mcp.Tool{Name: "send_email"}, func(ctx context.Context, req *mcp.CallToolRequest, in emailIn) (*mcp.CallToolResult, map[string]any, error) {
		if point, data := mcpmw.RecoveryPoint(ctx); point == "sent" && !m.rerun {
			return nil, map[string]any{"id": string(data)}, nil
		}
		n := m.sent.Add(1)
		m.audits.Add(m.perRun - 1)
		id := fmt.Sprintf("msg_%d", n)
		if _, crash := req.Params.Meta["crash"]; crash {
			if err := mcpmw.Checkpoint(ctx, "sent", []byte(id)); err != nil {
				return nil, nil, err
			}
			panic("the mailer process died")
		}
		return nil, map[string]any{"id": id}, nil
	})
	if opts != nil {
		if opts.Logger == nil {
			opts.Logger = slog.New(slog.DiscardHandler)
		}
		m.server.AddReceivingMiddleware(mcpmw.New(store, *opts))
	}
	return m
}

// effects counts the mailer's side effects: emails and audit records.
func (m *mailer) effects() int { return int(m.sent.Load() + m.audits.Load()) }

// crash marks the first attempt for the crash-resume check.
func crash(meta mcp.Meta) { meta["crash"] = true }

func newStore(t *testing.T) (*redisstore.Store, *redistest.Server) {
	srv := redistest.Start(t)
	store, err := redisstore.New(srv.Client(t), redisstore.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return store, srv
}

// clientName scopes a call by the client's name, all the in-memory
// transport carries: "alice-refreshed" is alice with another credential.
func clientName(_ context.Context, req *mcp.CallToolRequest) (string, error) {
	return strings.TrimSuffix(req.Session.InitializeParams().ClientInfo.Name, "-refreshed"), nil
}

// bearerUser scopes a call by its bearer token's user: "alice-refreshed"
// is alice's refreshed token.
func bearerUser(_ context.Context, req *mcp.CallToolRequest) (string, error) {
	token := strings.TrimPrefix(req.Extra.Header.Get("Authorization"), "Bearer ")
	if token == "" {
		return "", errors.New("no token")
	}
	return strings.TrimSuffix(token, "-refreshed"), nil
}

// streamableTransport reaches url as caller, its bearer token.
func streamableTransport(url string) func(context.Context, string) (mcp.Transport, error) {
	return func(_ context.Context, caller string) (mcp.Transport, error) {
		return &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{caller}}}, nil
	}
}

// A server behind mcpmw passes every check, over the in-memory transport
// (Config.Server) and over streamable HTTP (Config.Transport, the caller as
// a bearer token).
func TestGuardedServerPassesEveryCheck(t *testing.T) {
	t.Run("in-memory", func(t *testing.T) {
		store, srv := newStore(t)
		m := newMailer(t, store, &mcpmw.Options{Scope: clientName})
		rec := newRecorder(ctxT(t))
		run(rec, Config{
			Server: m.server, Tool: "send_email", OtherCaller: "bob", SameCaller: "alice-refreshed", Crash: crash,
			Arguments:   map[string]any{"to": "ann@example.com", "subject": "hello"},
			SideEffects: m.effects,
			Redis:       srv.Client(t),
		})
		require.Empty(t, rec.failed)
		require.Empty(t, rec.skipped)
	})
	t.Run("streamable", func(t *testing.T) {
		store, srv := newStore(t)
		m := newMailer(t, store, &mcpmw.Options{Scope: bearerUser})
		hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m.server }, nil))
		t.Cleanup(hs.Close)
		rec := newRecorder(ctxT(t))
		run(rec, Config{
			Transport: streamableTransport(hs.URL),
			Tool:      "send_email", OtherCaller: "bob", SameCaller: "alice-refreshed", Crash: crash,
			Arguments:   map[string]any{"to": "ann@example.com", "subject": "hello"},
			SideEffects: m.effects,
			Redis:       srv.Client(t),
		})
		require.Empty(t, rec.failed)
		require.Empty(t, rec.skipped)
	})
	t.Run("Run", func(t *testing.T) {
		store, _ := newStore(t)
		m := newMailer(t, store, &mcpmw.Options{Scope: clientName})
		Run(t, Config{
			Server: m.server, Tool: "send_email", OtherCaller: "bob",
			Arguments:   map[string]any{"to": "ann@example.com", "subject": "hello"},
			SideEffects: m.effects,
		})
	})
}

// The default scope hashes the bearer token of a call without a verified
// token: the same caller with a refreshed token is another scope, and the
// same-caller check says to set Options.Scope.
func TestDefaultScopeFailsTheSameCallerCheck(t *testing.T) {
	store, _ := newStore(t)
	m := newMailer(t, store, &mcpmw.Options{})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m.server }, nil))
	t.Cleanup(hs.Close)
	rec := newRecorder(ctxT(t))
	run(rec, Config{
		Transport: streamableTransport(hs.URL), Tool: "send_email", SameCaller: "alice-refreshed",
		Arguments:   map[string]any{"to": "ann@example.com", "subject": "hello"},
		SideEffects: m.effects,
	})
	require.Contains(t, strings.Join(rec.failed["same-caller"], "\n"), "set mcpmw's Options.Scope to the authenticated caller")
	for name, msgs := range rec.failed {
		require.Equal(t, "same-caller", name, "%v", msgs)
	}
}

// A tool that does not resume from its checkpoint sends the email again
// after a crash: the crash-resume check counts two.
func TestRerunAfterCrashFailsTheCrashCheck(t *testing.T) {
	store, _ := newStore(t)
	m := newMailer(t, store, &mcpmw.Options{Scope: clientName})
	m.rerun = true
	rec := newRecorder(ctxT(t))
	run(rec, Config{
		Server: m.server, Tool: "send_email", Crash: crash,
		Arguments:   map[string]any{"to": "ann@example.com", "subject": "hello"},
		SideEffects: m.effects,
	})
	require.Contains(t, strings.Join(rec.failed["crash-resume"], "\n"), "SideEffects rose by 2 for a crashed call and its retry (want 1")
	for name, msgs := range rec.failed {
		require.Equal(t, "crash-resume", name, "%v", msgs)
	}
}

// SideEffectsPerRun says how far one run moves SideEffects: with the
// mailer's email and audit record per run, 2 passes every check, and the
// default, 1, fails those that count a run.
func TestSideEffectsPerRun(t *testing.T) {
	for _, c := range []struct {
		perRun *int
		fails  []string
	}{
		{new(2), nil},
		{nil, []string{"concurrency", "side-effects", "lost-response", "scope", "crash-resume"}},
	} {
		store, _ := newStore(t)
		m := newMailer(t, store, &mcpmw.Options{Scope: clientName})
		m.perRun = 2
		rec := newRecorder(ctxT(t))
		run(rec, Config{
			Server: m.server, Tool: "send_email", OtherCaller: "bob", Crash: crash, SideEffectsPerRun: c.perRun,
			Arguments:   map[string]any{"to": "ann@example.com", "subject": "hello"},
			SideEffects: m.effects,
		})
		var failed []string
		for name := range rec.failed {
			failed = append(failed, name)
		}
		require.ElementsMatch(t, c.fails, failed, "%v", rec.failed)
	}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// recorder is a tester that records what failed, for the kit's own tests.
type recorder struct {
	ctx     context.Context
	name    string
	mu      *sync.Mutex
	failed  map[string][]string
	skipped map[string]string
	logs    *[]string
}

func newRecorder(ctx context.Context) *recorder {
	return &recorder{ctx: ctx, mu: &sync.Mutex{}, failed: map[string][]string{}, skipped: map[string]string{}, logs: &[]string{}}
}

func (r *recorder) Helper()                  {}
func (r *recorder) Context() context.Context { return r.ctx }
func (r *recorder) Logf(f string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.logs = append(*r.logs, fmt.Sprintf(f, a...))
}
func (r *recorder) Errorf(f string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed[r.name] = append(r.failed[r.name], fmt.Sprintf(f, a...))
}
func (r *recorder) Fatalf(f string, a ...any) { r.Errorf(f, a...); panic(stopCheck{}) }
func (r *recorder) Skipf(f string, a ...any) {
	r.Logf(f, a...)
	r.mu.Lock()
	r.skipped[r.name] = fmt.Sprintf(f, a...)
	r.mu.Unlock()
	panic(stopCheck{})
}
func (r *recorder) Run(name string, f func(t tester)) bool {
	sub := *r
	sub.name = name
	func() {
		defer func() {
			if p := recover(); p != nil {
				if _, ok := p.(stopCheck); !ok {
					panic(p)
				}
			}
		}()
		f(&sub)
	}()
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.failed[name]) == 0
}

type stopCheck struct{}

// A server without the middleware fails the checks that count: it runs
// every copy, replays nothing, refuses nothing.
func TestUnguardedServerFailsTheChecks(t *testing.T) {
	store, _ := newStore(t)
	m := newMailer(t, store, nil)
	rec := newRecorder(ctxT(t))
	run(rec, Config{
		Server: m.server, Tool: "send_email", OtherCaller: "bob", Parallel: 5,
		Arguments:   map[string]any{"to": "ann@example.com", "subject": "hello"},
		SideEffects: m.effects,
	})
	for _, check := range []string{"missing-key", "malformed-key", "concurrency", "replay", "mismatch", "side-effects", "lost-response"} {
		require.NotEmpty(t, rec.failed[check], "check %s passed an unguarded server", check)
	}
	require.Contains(t, strings.Join(rec.failed["concurrency"], "\n"), "SideEffects rose by 5 for 5 copies")
	require.Empty(t, rec.failed["scope"], "another caller runs on its own either way")
}

// A server whose scope puts every caller together fails the scope check.
func TestSharedScopeFailsTheScopeCheck(t *testing.T) {
	store, _ := newStore(t)
	m := newMailer(t, store, &mcpmw.Options{Scope: mcpmw.SharedScope("everyone")})
	rec := newRecorder(ctxT(t))
	run(rec, Config{
		Server: m.server, Tool: "send_email", OtherCaller: "bob",
		Arguments:   map[string]any{"to": "ann@example.com", "subject": "hello"},
		SideEffects: m.effects,
	})
	require.Contains(t, strings.Join(rec.failed["scope"], "\n"), "callers share a scope")
	for _, check := range []string{"concurrency", "replay", "mismatch", "side-effects", "lost-response"} {
		require.Empty(t, rec.failed[check], check)
	}
}

// A Config without what the checks need fails at once, saying which field.
func TestConfigIsChecked(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Tool: "t", Arguments: map[string]any{}, SideEffects: func() int { return 0 }}, "Config.Server or Config.Transport"},
		{Config{Server: &mcp.Server{}, Tool: "t", Arguments: map[string]any{}, SideEffects: func() int { return 0 }, SideEffectsPerRun: new(-1)}, "Config.SideEffectsPerRun"},
		{Config{Server: &mcp.Server{}, Tool: "t", Arguments: map[string]any{}, SideEffects: func() int { return 0 }, SameCaller: "alice"}, "Config.SameCaller"},
		{Config{Server: &mcp.Server{}, Arguments: map[string]any{}, SideEffects: func() int { return 0 }}, "Config.Tool"},
		{Config{Server: &mcp.Server{}, Tool: "t", SideEffects: func() int { return 0 }}, "Config.Arguments"},
		{Config{Server: &mcp.Server{}, Tool: "t", Arguments: map[string]any{}}, "Config.SideEffects"},
	} {
		err := c.cfg.check()
		require.ErrorContains(t, err, c.want)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// A key under the store's prefix without a TTL fails the ttl check, by
// name.
func TestTTLCheckFindsAKeyWithoutTTL(t *testing.T) {
	store, srv := newStore(t)
	rdb := srv.Client(t)
	require.NoError(t, rdb.Set(context.Background(), "idem:stray", "x", 0).Err())
	m := newMailer(t, store, &mcpmw.Options{Scope: clientName})
	rec := newRecorder(ctxT(t))
	run(rec, Config{
		Server: m.server, Tool: "send_email", Redis: rdb,
		Arguments:   map[string]any{"to": "ann@example.com", "subject": "hello"},
		SideEffects: m.effects,
	})
	require.Equal(t, []string{`mcpmwtest: check ttl failed: "idem:stray" has no TTL: it would stay in Redis for ever`}, rec.failed["ttl"])
	for name, msgs := range rec.failed {
		require.Equal(t, "ttl", name, "%v", msgs)
	}
}

// The kit adds no test framework to its users' dependencies.
func TestNoTestify(t *testing.T) {
	gobin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			t.Skip("no go command")
		}
	}
	out, err := exec.CommandContext(t.Context(), gobin, "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, dep := range strings.Fields(string(out)) {
		require.NotContains(t, dep, "testify", "mcpmwtest depends on %s", dep)
	}
	require.Contains(t, string(out), "github.com/idemkey/idemkey/mcpmw\n")
}
