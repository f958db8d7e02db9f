// Package hop is storm's fault injection: hops that stand between the
// service under test and what it calls, and disturb what passes on a
// schedule shared with the run.
//
// An HTTP hop (--proxy NAME=LISTEN,UPSTREAM) listens on loopback and
// forwards every request to its upstream URL; a TCP hop (--tcp-proxy
// NAME=LISTEN,ADDR) pipes every connection to its upstream address (Redis,
// or anything that is not HTTP). The service is configured to call the
// hop instead of its dependency. Each hop has a schedule of windows, given
// by --fault:
//
//	NAME at=D for=D [latency=D[..D]] [errors=P%[:STATUS]] [down]
//
// From at to at+for after the run's start, the hop adds latency (fixed, or
// a uniform draw in a range), answers a share of the requests with STATUS
// (503 by default) without forwarding them (HTTP only), or is down: it
// resets the connections made to it, and those open at their next byte.
// The share of errors is exact and spread evenly over the window's
// requests; a window's effects are decided when a request (TCP: a write)
// arrives, on the clock Options.Now, so a test can open a window without
// waiting for it.
//
//	specs := []hop.Spec{must(hop.ParseProxy("provider=127.0.0.1:9001,http://127.0.0.1:8081"))}
//	faults := []hop.Fault{must(hop.ParseFault("provider at=5s for=10s latency=200ms..400ms"))}
//	set, err := hop.Open(specs, faults, hop.Options{}) // listening, no faults yet
//	defer set.Close()
//	start := time.Now()
//	set.Begin(start) // the windows count from the run's start
//	... run the storm ...
//	for _, rec := range set.Records() { ... rec.Window, rec.Requests, rec.Delayed, rec.Failed, rec.Refused }
//
// Every window's Record counts what met it open; Begin starts a fresh run
// of the schedule (an arm of a storm) with fresh counts. Hops listen on
// loopback only, hold at most Options.MaxConns client connections each
// (and so a bounded number of goroutines), and Close ends all of it: the
// listener, every connection, the delays in progress and the requests
// being forwarded, and waits for the hop's goroutines.
package hop
