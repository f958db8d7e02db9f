// Command example is an MCP server with a send_email tool behind mcpmw,
// and an agent that calls it over the streamable HTTP transport with a
// timeout shorter than the mail server takes: every call times out, the
// agent retries it with the same key, and every email is sent once.
//
//	go run ./example                          # on an embedded miniredis
//	go run ./example -redis redis://127.0.0.1:6379/0
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkey/idemkey/mcpmw"
	"github.com/idemkey/idemkey/redisstore"
)

func main() {
	// $REDIS_URL is read after parsing, not as the flag's default: -h and
	// usage errors print defaults, password and all.
	url := flag.String("redis", "", "Redis URL (default: $REDIS_URL, else an embedded miniredis, gone on exit)")
	n := flag.Int("emails", 3, "emails the agent sends")
	flag.Parse()
	if *url == "" {
		*url = os.Getenv("REDIS_URL")
	}
	if err := run(os.Stdout, *url, *n); err != nil {
		log.Fatal(err)
	}
}

// Mail is the slow mail server the tool sends through.
type Mail struct {
	sent atomic.Int64
}

// Email is send_email's arguments.
type Email struct {
	To      string `json:"to" jsonschema:"the recipient"`
	Subject string `json:"subject"`
}

// Sent is send_email's result.
type Sent struct {
	MessageID string `json:"message_id"`
}

// sendEmail is the tool: it takes longer than the agent waits. Its context
// is detached from the agent's, so the agent giving up does not stop it;
// the provider gets the derived key, so that even a retry that reached it
// would not send twice.
func (m *Mail) sendEmail(ctx context.Context, _ *mcp.CallToolRequest, in Email) (*mcp.CallToolResult, Sent, error) {
	select {
	case <-time.After(300 * time.Millisecond): // the mail server is slow today
	case <-ctx.Done():
		return nil, Sent{}, ctx.Err()
	}
	m.sent.Add(1)
	return nil, Sent{MessageID: "msg_" + mcpmw.DerivedKey(ctx, "send")[:12]}, nil
}

func run(w io.Writer, url string, emails int) error {
	rdb, where, closeRedis, err := openRedis(url)
	if err != nil {
		return err
	}
	defer closeRedis()
	// The embedded miniredis neither evicts nor persists: nothing for the
	// store's start-up check to warn about (a real Redis is checked).
	store, err := redisstore.New(rdb, redisstore.Options{NoStartupCheck: url == ""})
	if err != nil {
		return err
	}

	// The server: send_email guarded (it is not annotated read-only), each
	// caller in its own scope by its bearer token (mcpmw.DefaultScope).
	mail := &Mail{}
	server := mcp.NewServer(&mcp.Implementation{Name: "mailer", Version: "v1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "send_email", Description: "Sends an email."}, mail.sendEmail)
	server.AddReceivingMiddleware(mcpmw.New(store, mcpmw.Options{RetryAfter: 50 * time.Millisecond}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Close()
	endpoint := "http://" + lis.Addr().String()
	fmt.Fprintf(w, "MCP server at %s, store on %s\n", endpoint, where)

	// The agent: gives each attempt 100ms, and retries through mcpmw's
	// client middleware, which keeps the call's key. The middleware after
	// it counts what goes on the wire.
	var attempts atomic.Int64
	agent := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil)
	agent.AddSendingMiddleware(
		mcpmw.NewClient(mcpmw.ClientOptions{MaxAttempts: 20, AttemptTimeout: 100 * time.Millisecond}),
		func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				if method == "tools/call" {
					attempts.Add(1)
				}
				return next(ctx, method, req)
			}
		})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	httpClient := &http.Client{Transport: bearer{token: "agent-7", base: http.DefaultTransport}}
	session, err := agent.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: httpClient}, nil)
	if err != nil {
		return err
	}
	defer session.Close()
	if settings, ok := mcpmw.Advertised(session.InitializeResult().Capabilities); ok {
		fmt.Fprintf(w, "the server advertises %s: the key goes in params._meta.%v\n", mcpmw.Capability, settings["metaKey"])
	}

	for i := 1; i <= emails; i++ {
		before := attempts.Load()
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "send_email",
			Arguments: Email{To: "ann@example.com", Subject: fmt.Sprintf("Invoice %d", i)}})
		if err != nil {
			return fmt.Errorf("email %d: %w", i, err)
		}
		if res.IsError {
			return fmt.Errorf("email %d: the tool failed: %v", i, res.Content)
		}
		id, _ := res.StructuredContent.(map[string]any)["message_id"].(string)
		fmt.Fprintf(w, "email %d: %s after %d attempts, replayed %v\n", i, id, attempts.Load()-before, mcpmw.Replayed(res))
	}
	fmt.Fprintf(w, "%d send_email calls, %d attempts, %d emails sent\n", emails, attempts.Load(), mail.sent.Load())

	// A client without the middleware sends no key: refused, not run.
	bare := mcp.NewClient(&mcp.Implementation{Name: "bare", Version: "v1"}, nil)
	bs, err := bare.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: httpClient}, nil)
	if err != nil {
		return err
	}
	defer bs.Close()
	_, err = bs.CallTool(ctx, &mcp.CallToolParams{Name: "send_email", Arguments: Email{To: "ann@example.com", Subject: "Hi"}})
	if err == nil {
		return errors.New("a call without a key ran")
	}
	fmt.Fprintf(w, "a call without a key: refused (%s)\n", mcpmw.Reason(nil, err))
	return nil
}

// bearer sends the agent's credential with every request: the default
// scope keeps each credential's keys apart.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}
