// Package faultproxy is a TCP proxy for tests that stands between a Redis
// client and a Redis server on loopback and disturbs chosen commands while
// the test runs: added latency (Delay), a dead network (Blackhole), a reset
// connection (Reset), and a reply lost after the server acted on the command
// (LoseReply).
//
// The proxy reads the RESP commands clients send, so a Fault can target the
// Nth command, or those whose name or arguments match, even inside a
// pipeline; it also reads the server's replies (RESP2 and RESP3), so it can
// cut a connection exactly at the reply to a given command. Faults are
// deterministic: the same commands in the same order meet the same fate.
//
//	srv := redistest.Start(t)
//	p := faultproxy.Start(t, srv.Addr())
//	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
//	lost := p.Inject(faultproxy.Fault{
//		Action: faultproxy.LoseReply,
//		Match:  faultproxy.Prefix("EVALSHA", script.Hash()),
//		Times:  1,
//	})
//	// ... run the script through c: it runs twice, the client sees one answer.
//
// A cluster or Sentinel client learns node addresses from the servers; to
// route it through proxies, one per node, set its Dialer to Dialer(proxies...).
//
// Everything listens on and connects to loopback only. Every goroutine of a
// Proxy ends when it is closed; faults that hold commands (Delay, Blackhole)
// are bounded by Close and by the client's own timeouts.
package faultproxy
