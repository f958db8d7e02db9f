package mcpmwtest

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkey/idemkey/mcpmw"
)

// dropper drops the response to the one tools/call that carries its key,
// as a network that loses it after the server answered would.
type dropper struct {
	mu      sync.Mutex
	key     string      // the key whose call's response to drop; "" for none
	id      jsonrpc.ID  // that call's request ID, once sent
	sent    bool        // id is set
	dropped chan []byte // receives the dropped response's JSON
}

// arm makes the dropper drop the response to the call with key.
func (d *dropper) arm(key string) <-chan []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.key, d.sent, d.dropped = key, false, make(chan []byte, 1)
	return d.dropped
}

// disarm makes it drop nothing more.
func (d *dropper) disarm() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.key, d.sent = "", false
}

// dropConn is a client connection through the kit's dropper.
type dropConn struct {
	mcp.Connection
	d *dropper
}

func (c dropConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if r, ok := msg.(*jsonrpc.Request); ok && r.Method == "tools/call" && r.IsCall() {
		var p struct {
			Meta map[string]any `json:"_meta"`
		}
		_ = json.Unmarshal(r.Params, &p)
		key, _ := p.Meta[mcpmw.MetaKey].(string)
		c.d.mu.Lock()
		if key != "" && key == c.d.key && !c.d.sent {
			c.d.id, c.d.sent = r.ID, true
		}
		c.d.mu.Unlock()
	}
	return c.Connection.Write(ctx, msg)
}

func (c dropConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		r, ok := msg.(*jsonrpc.Response)
		if err != nil || !ok {
			return msg, err
		}
		c.d.mu.Lock()
		drop := c.d.sent && c.d.key != "" && r.ID == c.d.id
		if drop {
			c.d.key = ""
			b, _ := jsonrpc.EncodeMessage(r)
			c.d.dropped <- b
		}
		c.d.mu.Unlock()
		if !drop {
			return msg, nil
		}
	}
}

// dropTransport connects through the kit's dropper.
type dropTransport struct {
	mcp.Transport
	d *dropper
}

func (t dropTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return dropConn{c, t.d}, nil
}

func (k *kit) close() {
	for _, c := range k.closers {
		c()
	}
}
