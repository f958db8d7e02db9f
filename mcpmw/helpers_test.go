package mcpmw_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/mcpmw"
	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/redisstore"
)

// transport is how the test's clients reach the server.
type transport string

const (
	inMemory   transport = "in-memory"  // mcp.NewInMemoryTransports: one pair per client
	streamable transport = "streamable" // the streamable HTTP transport on 127.0.0.1
)

// bothTransports runs f once over each transport.
func bothTransports(t *testing.T, f func(t *testing.T, tr transport)) {
	for _, tr := range []transport{inMemory, streamable} {
		t.Run(string(tr), func(t *testing.T) { f(t, tr) })
	}
}

// emailIn is send_email's arguments.
type emailIn struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	SentAt  string `json:"sent_at,omitempty"` // the agent's timestamp: Options.Ignore in the tests
	Key     string `json:"idempotency_key,omitempty"`
}

// emailOut is send_email's structured result.
type emailOut struct {
	ID      string `json:"id"`
	Attempt int    `json:"attempt"`
}

// emailFunc is send_email's body, which each test may replace.
type emailFunc func(ctx context.Context, req *mcp.CallToolRequest, in emailIn) (*mcp.CallToolResult, emailOut, error)

// setup configures a harness; the zero value guards every tool not
// annotated read-only, on a fresh redis-server.
type setup struct {
	redis  *redistest.Server // default: a fresh one
	store  redisstore.Options
	server mcpmw.Options
	email  emailFunc            // default: h.send
	client *mcpmw.ClientOptions // NewClient on every client; nil for none
	tools  func(*mcp.Server)    // adds more tools
	inner  mcp.Middleware       // a receiving middleware under mcpmw's
	http   http.RoundTripper    // the streamable clients' transport under their credential
}

// harness is an MCP server with three tools behind mcpmw, and a way to
// connect clients to it as a caller:
//
//	send_email     mcp.AddTool, counted in sent (unless setup.email says otherwise)
//	create_ticket  Server.AddTool (a raw handler), counted in tickets; fails with a Go error while failTicket
//	lookup         annotated readOnlyHint, counted in lookups
type harness struct {
	t          testing.TB
	tr         transport
	redis      *redistest.Server
	store      *redisstore.Store
	server     *mcp.Server
	url        string // the streamable endpoint
	client     *mcpmw.ClientOptions
	http       http.RoundTripper
	raw        *rawLog
	sent       atomic.Int64
	tickets    atomic.Int64
	lookups    atomic.Int64
	failTicket atomic.Bool
}

// start builds the server over tr. Over the in-memory transport, which
// carries no credential, the scope is the client's name (unless
// s.server.Scope is set); over HTTP it is DefaultScope's, from the
// Authorization header each caller sends.
func start(t testing.TB, tr transport, s setup) *harness {
	t.Helper()
	if s.redis == nil {
		s.redis = redistest.Start(t)
	}
	if s.store.Lease == 0 {
		s.store.Lease = 2 * time.Second
	}
	if s.store.Logger == nil {
		s.store.Logger = slog.New(slog.DiscardHandler)
	}
	if s.server.Logger == nil {
		s.server.Logger = slog.New(slog.DiscardHandler)
	}
	if s.server.Scope == nil && tr == inMemory {
		s.server.Scope = func(_ context.Context, req *mcp.CallToolRequest) (string, error) {
			return "client:" + req.Session.InitializeParams().ClientInfo.Name, nil
		}
	}
	store, err := redisstore.New(s.redis.Client(t), s.store)
	require.NoError(t, err)
	h := &harness{t: t, tr: tr, redis: s.redis, store: store, client: s.client, http: s.http, raw: &rawLog{}}
	if h.http == nil {
		h.http = http.DefaultTransport
	}
	email := s.email
	if email == nil {
		email = h.send
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "mailer", Version: "v1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "send_email", Description: "sends an email"}, mcp.ToolHandlerFor[emailIn, emailOut](email))
	srv.AddTool(&mcp.Tool{Name: "create_ticket", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if h.failTicket.Load() {
				return nil, fmt.Errorf("the ticket system is down")
			}
			n := h.tickets.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("ticket T-%d", n)}}}, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "lookup", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
			n := h.lookups.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("lookup %d", n)}}}, nil, nil
		})
	if s.tools != nil {
		s.tools(srv)
	}
	if s.inner != nil {
		srv.AddReceivingMiddleware(s.inner)
	}
	srv.AddReceivingMiddleware(mcpmw.New(store, s.server))
	h.server = srv
	if tr == streamable {
		hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
		t.Cleanup(hs.Close)
		h.url = hs.URL
	}
	return h
}

// send is send_email's default body: one email per run.
func (h *harness) send(ctx context.Context, req *mcp.CallToolRequest, in emailIn) (*mcp.CallToolResult, emailOut, error) {
	n := h.sent.Add(1)
	return nil, emailOut{ID: fmt.Sprintf("msg_%d", n), Attempt: mcpmw.Attempt(ctx)}, nil
}

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// connect connects a client as caller and returns its session.
func (h *harness) connect(caller string) *mcp.ClientSession {
	t := h.t
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: caller, Version: "v1"}, nil)
	if h.client != nil {
		c.AddSendingMiddleware(mcpmw.NewClient(*h.client))
	}
	ctx := ctxT(t, 10*time.Second)
	var ct mcp.Transport
	switch h.tr {
	case inMemory:
		st, cl := mcp.NewInMemoryTransports()
		ss, err := h.server.Connect(ctx, st, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = ss.Close() })
		ct = cl
	case streamable:
		ct = &mcp.StreamableClientTransport{Endpoint: h.url, HTTPClient: &http.Client{Transport: bearer{caller, h.http}}}
	}
	ct = rawTransport{ct, h.raw}
	cs, err := c.Connect(ctx, ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// email calls send_email with key (none if "") and args.
func email(ctx context.Context, cs *mcp.ClientSession, key string, args map[string]any) (*mcp.CallToolResult, error) {
	return callTool(ctx, cs, "send_email", key, args)
}

// callTool calls tool with key in params._meta.idempotencyKey (none if "").
func callTool(ctx context.Context, cs *mcp.ClientSession, tool, key string, args map[string]any) (*mcp.CallToolResult, error) {
	p := &mcp.CallToolParams{Name: tool, Arguments: args}
	if key != "" {
		p.Meta = mcp.Meta{mcpmw.MetaKey: key}
	}
	return cs.CallTool(ctx, p)
}

// ann is a message to ann@example.com.
func ann(subject string) map[string]any {
	return map[string]any{"to": "ann@example.com", "subject": subject}
}

// structured returns a result's structured content as an emailOut.
func structured(t *testing.T, res *mcp.CallToolResult) emailOut {
	t.Helper()
	require.NotNil(t, res)
	m, ok := res.StructuredContent.(map[string]any)
	require.True(t, ok, "structured content %#v", res.StructuredContent)
	id, _ := m["id"].(string)
	attempt, _ := m["attempt"].(float64)
	return emailOut{ID: id, Attempt: int(attempt)}
}

// text returns a result's first text content.
func text(res *mcp.CallToolResult) string {
	if res == nil || len(res.Content) == 0 {
		return ""
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return ""
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// redisstoreObserving returns store options whose observer calls f with
// the reason of every in-progress answer.
func redisstoreObserving(f func(reason string)) redisstore.Options {
	return redisstore.Options{Observer: observe.Func{OnEvent: func(_ context.Context, e *observe.Event) {
		if e.Kind == observe.InProgress {
			f(e.Problem)
		}
	}}}
}

// rawLog keeps the result of every response the harness's clients read, as
// the bytes that came over the wire.
type rawLog struct {
	mu      sync.Mutex
	results []json.RawMessage
}

// last returns the last result read.
func (l *rawLog) last() json.RawMessage {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.results) == 0 {
		return nil
	}
	return l.results[len(l.results)-1]
}

// rawTransport logs the results its connection reads.
type rawTransport struct {
	mcp.Transport
	log *rawLog
}

func (t rawTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return rawConn{c, t.log}, nil
}

type rawConn struct {
	mcp.Connection
	log *rawLog
}

func (c rawConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if r, ok := msg.(*jsonrpc.Response); ok && r.Result != nil {
		c.log.mu.Lock()
		c.log.results = append(c.log.results, slices.Clone(r.Result))
		c.log.mu.Unlock()
	}
	return msg, err
}
