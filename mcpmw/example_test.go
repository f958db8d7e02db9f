package mcpmw_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkey/idemkey/mcpmw"
	"github.com/idemkey/idemkey/redisstore"
)

type invoice struct {
	To     string `json:"to"`
	Amount int    `json:"amount"`
}

// sendInvoice is a tool with a side effect: it hands the mail provider the
// derived key, so that even a retry that reached the provider sends once.
func sendInvoice(ctx context.Context, _ *mcp.CallToolRequest, in invoice) (*mcp.CallToolResult, map[string]any, error) {
	id := "msg_" + mcpmw.DerivedKey(ctx, "send")[:8] // the provider's idempotency key
	return nil, map[string]any{"message_id": id}, nil
}

// userOf is the caller: the user of the request's verified token.
func userOf(_ context.Context, req *mcp.CallToolRequest) (string, error) {
	if req.Extra == nil || req.Extra.TokenInfo == nil || req.Extra.TokenInfo.UserID == "" {
		return "", errors.New("unauthenticated")
	}
	return req.Extra.TokenInfo.UserID, nil
}

// A server whose send_invoice tool runs once per (user, key): add the
// middleware last, so it is the outermost.
func ExampleNew() {
	var store *redisstore.Store // redisstore.New(rdb, redisstore.Options{})
	if store == nil {
		return
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "billing", Version: "v1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "send_invoice"}, sendInvoice)
	server.AddReceivingMiddleware(mcpmw.New(store, mcpmw.Options{
		Scope:  userOf,
		Ignore: []string{"sent_at"}, // an agent's timestamp: not part of the call
	}))
}

// An agent whose tool calls each carry one key, kept on the retries the
// middleware makes after a timed-out attempt or an in-progress answer.
func ExampleNewClient() {
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil)
	client.AddSendingMiddleware(mcpmw.NewClient(mcpmw.ClientOptions{
		MaxAttempts:    5,
		AttemptTimeout: 5 * time.Second,
	}))
	session, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://127.0.0.1:8080/mcp"}, nil)
	if err != nil {
		log.Print(err)
		return
	}
	defer session.Close()
	res, err := session.CallTool(context.Background(), &mcp.CallToolParams{Name: "send_invoice", Arguments: invoice{To: "ann@example.com", Amount: 1200}})
	if err == nil {
		log.Printf("replayed %v", mcpmw.Replayed(res))
	}
}
