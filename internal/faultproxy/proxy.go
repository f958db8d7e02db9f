package faultproxy

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	dialTimeout = 5 * time.Second // to the target, per accepted connection
	queueLen    = 1024            // commands read ahead of the one being forwarded
	bufSize     = 32 << 10
)

// Action is what a Fault does to the commands it applies to.
type Action int

const (
	// Pass forwards the command unchanged. A Pass rule only counts the
	// commands it matches (see Rule.Hits); unlike the other actions it does
	// not keep later rules from applying.
	Pass Action = iota + 1

	// Delay holds the command for Fault.Delay before forwarding it, so its
	// reply arrives at least that much later. Commands behind it on the same
	// connection keep their order and wait for it, but delays do not add up:
	// a pipeline of delayed commands arriving together is held once.
	Delay

	// Blackhole swallows the command and everything the client sends after
	// it on that connection, which stays open: the client waits for replies
	// that never come, as behind a dead network. Replies to earlier commands
	// still arrive. Matching every command (a nil Fault.Match) blackholes
	// new connections at their first command, so a client cannot even
	// complete its handshake.
	Blackhole

	// Reset never forwards the command: once the replies to the commands
	// before it on the connection have reached the client, the proxy resets
	// the client's connection (TCP RST) and closes its own to the server.
	Reset

	// LoseReply forwards the command, so the server runs it, and drops the
	// connection (a normal close; the client reads EOF) the moment the
	// server's reply to it arrives, before any of that reply reaches the
	// client. Commands the client sent after it on the connection are never
	// forwarded. Replies are matched to commands in order, one each, so the
	// connection must not be in a mode where commands go unanswered or get
	// several replies (SUBSCRIBE in RESP2, MONITOR, CLIENT REPLY OFF).
	LoseReply
)

// String returns the action's name, such as "LoseReply".
func (a Action) String() string {
	switch a {
	case Pass:
		return "Pass"
	case Delay:
		return "Delay"
	case Blackhole:
		return "Blackhole"
	case Reset:
		return "Reset"
	case LoseReply:
		return "LoseReply"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Command is one command a client sent through the proxy.
type Command struct {
	// Args are the command's arguments as sent; Args[0] is its name.
	Args []string
	// Conn numbers the client connection: 1 for the first the proxy
	// accepted, 2 for the next, and so on.
	Conn int
	// Seq numbers the command on its connection, from 1. Clients send
	// commands of their own on a new connection (go-redis: HELLO, CLIENT
	// SETINFO) before the caller's.
	Seq int
}

// Name returns the command's name in upper case, such as "EVALSHA".
func (c Command) Name() string { return strings.ToUpper(c.Args[0]) }

// Fault says which commands to disturb, and how.
type Fault struct {
	// Action is what to do. Required.
	Action Action

	// Match selects the commands the fault is for; see Name and Prefix. It
	// is called with the proxy's lock held, so it must be quick and must not
	// call the proxy. Default: nil, every command.
	Match func(Command) bool

	// Skip is how many matching commands pass untouched before the fault
	// applies: Skip: 2 targets the third. Default: 0.
	Skip int

	// Times is how many matching commands the fault applies to, after the
	// skipped ones. Default: 0, every one until the rule is removed.
	Times int

	// Delay is how long Action Delay holds each command. Required for Delay,
	// ignored otherwise.
	Delay time.Duration
}

// Rule is a Fault injected into a Proxy.
type Rule struct {
	p     *Proxy
	f     Fault
	seen  int // matching commands, skipped ones included
	hits  int
	gone  bool
	fired chan struct{}
}

// Hits returns how many commands the fault has applied to so far.
func (r *Rule) Hits() int {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	return r.hits
}

// Fired returns a channel that is closed when the fault first applies to a
// command, for a test to wait on instead of sleeping.
func (r *Rule) Fired() <-chan struct{} { return r.fired }

// Remove stops the fault from applying to further commands. Connections it
// has already blackholed, reset or cut stay so. It may be called more than
// once.
func (r *Rule) Remove() {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	r.gone = true
}

// Proxy is a TCP proxy on 127.0.0.1 in front of one Redis server, for tests:
// it forwards every client connection to the target and injects the faults a
// test steers it with while it runs. It reads the commands (RESP) clients
// send, so faults can target the Nth command or those whose name or
// arguments match, in pipelines too. Its methods are safe for concurrent
// use.
//
// Rules apply in the order they were injected: for each command, the first
// rule that applies decides what happens to it, and the rules after it do not
// see it (Pass rules only count, and let the command on).
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	mu       sync.Mutex
	rules    []*Rule
	conns    map[*conn]struct{}
	accepted int
	commands int
	closed   bool
}

// New starts a proxy to target, which must be a loopback address such as
// "127.0.0.1:6379", listening on a free port of 127.0.0.1. The caller must
// Close it. It fails if target is not on loopback or the proxy cannot listen.
func New(target string) (*Proxy, error) {
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: target %q: %w", target, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("faultproxy: target %q is not a loopback address", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[*conn]struct{}{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Go(p.accept)
	return p, nil
}

// Start is New for tests: it fails the test if the proxy cannot start, and
// closes the proxy when the test finishes.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Addr returns the address clients connect to, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Inject adds a fault and returns its rule. It panics if the fault has no
// valid Action, a Delay without a positive duration, or a negative Skip or
// Times: those are mistakes in the test.
func (p *Proxy) Inject(f Fault) *Rule {
	switch {
	case f.Action < Pass || f.Action > LoseReply:
		panic(fmt.Sprintf("faultproxy: invalid action %v", f.Action))
	case f.Action == Delay && f.Delay <= 0:
		panic("faultproxy: Delay needs a positive Fault.Delay")
	case f.Skip < 0 || f.Times < 0:
		panic("faultproxy: negative Skip or Times")
	}
	r := &Rule{p: p, f: f, fired: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, r)
	return r
}

// Clear removes every rule. Connections already blackholed, reset or cut
// stay so.
func (p *Proxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		r.gone = true
	}
	p.rules = nil
}

// Commands returns how many commands clients have sent through the proxy.
func (p *Proxy) Commands() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.commands
}

// Conns returns how many client connections the proxy has accepted.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// ResetConns resets every open client connection now (TCP RST), as a network
// blip would, whatever is in flight. New connections are accepted as usual.
func (p *Proxy) ResetConns() {
	p.mu.Lock()
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.shut(true)
	}
}

// Close stops accepting, closes every connection and waits until all the
// proxy's goroutines have ended. It returns nil; later calls do nothing.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	_ = p.ln.Close()
	p.mu.Lock()
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.shut(false)
	}
	p.wg.Wait()
	return nil
}

// decide returns what to do with cmd, and counts it.
func (p *Proxy) decide(cmd Command) (Action, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.commands++
	for _, r := range p.rules {
		if r.gone || (r.f.Times > 0 && r.hits >= r.f.Times) || (r.f.Match != nil && !r.f.Match(cmd)) {
			continue
		}
		if r.seen++; r.seen <= r.f.Skip {
			continue
		}
		if r.hits++; r.hits == 1 {
			close(r.fired)
		}
		if r.f.Action != Pass {
			return r.f.Action, r.f.Delay
		}
	}
	return Pass, 0
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			return
		}
		p.accepted++
		c := &conn{p: p, id: p.accepted, client: client, done: make(chan struct{}), queue: make(chan item, queueLen), resetAt: -1}
		p.conns[c] = struct{}{}
		p.wg.Go(c.run)
		p.mu.Unlock()
	}
}

// item is a command on its way to the server.
type item struct {
	raw     []byte
	action  Action
	release time.Time // not before
}

// conn is one client connection and its connection to the target. Three
// goroutines serve it: read (client to queue), write (queue to server) and
// relay (server to client). The first to stop shuts the others down.
type conn struct {
	p              *Proxy
	id             int
	client, server net.Conn
	queue          chan item
	done           chan struct{}
	once           sync.Once

	mu      sync.Mutex
	sent    int // commands forwarded to the server
	replies int // replies relayed to the client
	loseAt  int // drop the connection when this reply arrives; 0: none
	resetAt int // reset once this many replies are relayed; -1: none
}

func (c *conn) run() {
	d := net.Dialer{Timeout: dialTimeout}
	server, err := d.DialContext(c.p.ctx, "tcp", c.p.target)
	if err != nil {
		c.shut(false)
		return
	}
	c.mu.Lock()
	c.server = server
	c.mu.Unlock()
	select {
	case <-c.done: // shut while dialling
		_ = server.Close()
		return
	default:
	}
	var wg sync.WaitGroup
	wg.Go(c.write)
	wg.Go(c.relay)
	c.read()
	wg.Wait()
}

// shut closes both connections, with a TCP reset towards the client if rst
// is set, and ends the connection's goroutines. Only the first call counts.
func (c *conn) shut(rst bool) {
	c.once.Do(func() {
		close(c.done)
		if tcp, ok := c.client.(*net.TCPConn); ok && rst {
			_ = tcp.SetLinger(0)
		}
		_ = c.client.Close()
		c.mu.Lock()
		if c.server != nil {
			_ = c.server.Close()
		}
		c.mu.Unlock()
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

// read parses the client's commands, decides their fate and queues them. Once
// a command ends the connection's service (Blackhole, Reset, LoseReply), it
// reads and drops the rest without deciding, so they count for no rule.
func (c *conn) read() {
	defer c.shut(false)
	f := frameReader{r: bufio.NewReaderSize(c.client, bufSize)}
	var last time.Time // release time of the previous command: order is kept
	doomed := false
	for seq := 1; ; seq++ {
		args, err := f.command()
		if err != nil {
			return
		}
		if doomed {
			continue
		}
		action, delay := c.p.decide(Command{Args: args, Conn: c.id, Seq: seq})
		if action == Blackhole {
			doomed = true
			continue
		}
		doomed = action == Reset || action == LoseReply
		release := time.Now().Add(delay)
		if release.Before(last) {
			release = last
		}
		last = release
		it := item{raw: append([]byte(nil), f.buf...), action: action, release: release}
		select {
		case c.queue <- it:
		case <-c.done:
			return
		}
	}
}

// write forwards queued commands to the server when their time comes.
func (c *conn) write() {
	defer c.shut(false)
	w := bufio.NewWriterSize(c.server, bufSize)
	for {
		// Flush whenever the next command is not at hand, so a pipeline goes
		// out in one write as the client sent it, and nothing waits unsent.
		var it item
		select {
		case it = <-c.queue:
		default:
			if err := w.Flush(); err != nil {
				return
			}
			select {
			case it = <-c.queue:
			case <-c.done:
				return
			}
		}
		wait := time.Until(it.release)
		if wait > 0 || it.action == Reset {
			if err := w.Flush(); err != nil {
				return
			}
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-c.done:
				t.Stop()
				return
			}
		}
		c.mu.Lock()
		switch it.action {
		case Reset:
			if c.replies < c.sent {
				c.resetAt = c.sent
				c.mu.Unlock()
				continue // relay resets once the replies are through
			}
			c.mu.Unlock()
			c.shut(true)
			return
		case LoseReply:
			c.loseAt = c.sent + 1
		}
		c.sent++
		c.mu.Unlock()
		if _, err := w.Write(it.raw); err != nil {
			return
		}
	}
}

// relay forwards the server's replies to the client, one whole frame per
// write, and cuts the connection where a LoseReply or Reset says.
func (c *conn) relay() {
	defer c.shut(false)
	f := frameReader{r: bufio.NewReaderSize(c.server, bufSize)}
	for {
		push, err := f.reply()
		if err != nil {
			return
		}
		if !push {
			c.mu.Lock()
			lose := c.replies+1 == c.loseAt
			c.mu.Unlock()
			if lose {
				return // the deferred shut drops the connection
			}
		}
		if _, err := c.client.Write(f.buf); err != nil {
			return
		}
		if push {
			continue
		}
		c.mu.Lock()
		c.replies++
		reset := c.resetAt >= 0 && c.replies >= c.resetAt
		c.mu.Unlock()
		if reset {
			c.shut(true)
			return
		}
	}
}

// Name returns a Fault.Match that matches commands named any of names, in
// any case: Name("EVALSHA", "EVAL").
func Name(names ...string) func(Command) bool {
	return func(c Command) bool {
		for _, n := range names {
			if strings.EqualFold(c.Args[0], n) {
				return true
			}
		}
		return false
	}
}

// Prefix returns a Fault.Match that matches commands whose first arguments
// are args: the name in any case, the rest byte for byte. Prefix("EVALSHA",
// sha) matches every run of one script.
func Prefix(args ...string) func(Command) bool {
	return func(c Command) bool {
		if len(args) == 0 || len(c.Args) < len(args) || !strings.EqualFold(c.Args[0], args[0]) {
			return false
		}
		for i := 1; i < len(args); i++ {
			if c.Args[i] != args[i] {
				return false
			}
		}
		return true
	}
}

// Dialer returns a dial function for go-redis's Options.Dialer,
// ClusterOptions.Dialer or FailoverOptions.Dialer that connects through the
// proxy whose Target is the address asked for, and straight to any other
// address. A cluster or failover client learns node addresses from the
// servers, so this is how its connections go through proxies.
func Dialer(proxies ...*Proxy) func(ctx context.Context, network, addr string) (net.Conn, error) {
	via := make(map[string]string, len(proxies))
	for _, p := range proxies {
		via[p.Target()] = p.Addr()
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if a, ok := via[addr]; ok {
			addr = a
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
}
