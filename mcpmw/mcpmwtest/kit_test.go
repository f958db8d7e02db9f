package mcpmwtest

import (
	"context"
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
// puts mcpmw in front of it.
type mailer struct {
	server *mcp.Server
	sent   atomic.Int64
}

type emailIn struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func newMailer(t *testing.T, store *redisstore.Store, opts *mcpmw.Options) *mailer {
	m := &mailer{server: mcp.NewServer(&mcp.Implementation{Name: "mailer", Version: "v1"}, nil)}
	mcp.AddTool(m.server, &mcp.Tool{Name: "send_email"}, func(ctx context.Context, _ *mcp.CallToolRequest, in emailIn) (*mcp.CallToolResult, map[string]any, error) {
		n := m.sent.Add(1)
		return nil, map[string]any{"id": fmt.Sprintf("msg_%d", n)}, nil
	})
	if opts != nil {
		if opts.Logger == nil {
			opts.Logger = slog.New(slog.DiscardHandler)
		}
		m.server.AddReceivingMiddleware(mcpmw.New(store, *opts))
	}
	return m
}

func newStore(t *testing.T) (*redisstore.Store, *redistest.Server) {
	srv := redistest.Start(t)
	store, err := redisstore.New(srv.Client(t), redisstore.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return store, srv
}

// clientName scopes a call by the client's name: all the in-memory
// transport carries.
func clientName(_ context.Context, req *mcp.CallToolRequest) (string, error) {
	return req.Session.InitializeParams().ClientInfo.Name, nil
}

// A server behind mcpmw passes every check, over the in-memory transport
// (Config.Server) and over streamable HTTP (Config.Connect, the caller as
// a bearer token that mcpmw.DefaultScope hashes).
func TestGuardedServerPassesEveryCheck(t *testing.T) {
	t.Run("in-memory", func(t *testing.T) {
		store, srv := newStore(t)
		m := newMailer(t, store, &mcpmw.Options{Scope: clientName})
		Run(t, Config{
			Server: m.server, Tool: "send_email", OtherCaller: "bob",
			Arguments:   map[string]any{"to": "ann@example.com", "subject": "hello"},
			SideEffects: func() int { return int(m.sent.Load()) },
			Redis:       srv.Client(t),
		})
	})
	t.Run("streamable", func(t *testing.T) {
		store, srv := newStore(t)
		m := newMailer(t, store, &mcpmw.Options{})
		hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m.server }, nil))
		t.Cleanup(hs.Close)
		Run(t, Config{
			Connect: func(ctx context.Context, caller string) (*mcp.ClientSession, error) {
				c := mcp.NewClient(&mcp.Implementation{Name: "kit", Version: "v1"}, nil)
				return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL,
					HTTPClient: &http.Client{Transport: bearer{caller}}}, nil)
			},
			Tool: "send_email", OtherCaller: "bob",
			Arguments:   map[string]any{"to": "ann@example.com", "subject": "hello"},
			SideEffects: func() int { return int(m.sent.Load()) },
			Redis:       srv.Client(t),
		})
	})
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// recorder is a tester that records what failed, for the kit's own tests.
type recorder struct {
	ctx    context.Context
	name   string
	mu     *sync.Mutex
	failed map[string][]string
	logs   *[]string
}

func newRecorder(ctx context.Context) *recorder {
	return &recorder{ctx: ctx, mu: &sync.Mutex{}, failed: map[string][]string{}, logs: &[]string{}}
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
func (r *recorder) Skipf(f string, a ...any)  { r.Logf(f, a...); panic(stopCheck{}) }
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
		SideEffects: func() int { return int(m.sent.Load()) },
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
		SideEffects: func() int { return int(m.sent.Load()) },
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
		{Config{Tool: "t", Arguments: map[string]any{}, SideEffects: func() int { return 0 }}, "Config.Server or Config.Connect"},
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
		SideEffects: func() int { return int(m.sent.Load()) },
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
