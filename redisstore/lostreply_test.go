package redisstore

// Lost replies, script by script: a fault proxy between the store
// and Redis forwards one script call, lets Redis run it, and drops the
// connection before the reply reaches the client, which then sends the call
// again (go-redis does so on EOF, with MaxRetries at its default). Every
// script must give the same answer the second time, so that what the caller
// sees, what Redis holds and what the next caller gets are exactly what they
// are without the fault.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/faultproxy"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore/internal/script"
)

// proxied is a Redis deployment every connection of whose client goes
// through a fault proxy, one per node.
type proxied struct {
	client  redis.UniversalClient
	proxies []*faultproxy.Proxy
	// replicas is the Options.Replicas the deployment supports.
	replicas int
}

// inject adds f on every proxy and returns its rules.
func (p *proxied) inject(f faultproxy.Fault) rules {
	rs := make(rules, len(p.proxies))
	for i, px := range p.proxies {
		rs[i] = px.Inject(f)
	}
	return rs
}

// rules is one fault injected on several proxies.
type rules []*faultproxy.Rule

func (rs rules) hits() int {
	n := 0
	for _, r := range rs {
		n += r.Hits()
	}
	return n
}

func (rs rules) remove() {
	for _, r := range rs {
		r.Remove()
	}
}

func proxiesFor(t *testing.T, addrs []string) []*faultproxy.Proxy {
	ps := make([]*faultproxy.Proxy, len(addrs))
	for i, a := range addrs {
		ps[i] = faultproxy.Start(t, a)
	}
	return ps
}

// The deployments the lost-reply tests run on.
var lostReplyTopologies = []struct {
	name  string
	start func(t *testing.T) *proxied
}{
	{"single", func(t *testing.T) *proxied {
		srv := redistest.Start(t)
		ps := proxiesFor(t, []string{srv.Addr()})
		o := srv.Options()
		o.Dialer = faultproxy.Dialer(ps...)
		return &proxied{client: closing(t, redis.NewClient(o)), proxies: ps}
	}},
	{"single with a replica, Replicas 1", func(t *testing.T) *proxied {
		master := redistest.Start(t, redistest.Args("--repl-diskless-sync-delay", "0"))
		_ = redistest.Start(t, redistest.Args("--replicaof", "127.0.0.1", fmt.Sprint(master.Port())))
		redistest.WaitReplicas(t, master, 1)
		ps := proxiesFor(t, []string{master.Addr()})
		o := master.Options()
		o.Dialer = faultproxy.Dialer(ps...)
		return &proxied{client: closing(t, redis.NewClient(o)), proxies: ps, replicas: 1}
	}},
	{"cluster", func(t *testing.T) *proxied {
		cl := redistest.StartCluster(t, 3)
		ps := proxiesFor(t, cl.Addrs())
		o := cl.Options()
		o.Dialer = faultproxy.Dialer(ps...)
		return &proxied{client: closing(t, redis.NewClusterClient(o)), proxies: ps}
	}},
	// On the auto-pipeliner a lost reply fails the batch it came in, and
	// the pipeliner sends the whole batch again. (Replicas needs the client
	// itself: no pipelined topology with replicas.)
	{"single, pipelined", func(t *testing.T) *proxied {
		srv := redistest.Start(t)
		ps := proxiesFor(t, []string{srv.Addr()})
		o := srv.Options()
		o.Dialer = faultproxy.Dialer(ps...)
		return &proxied{client: autoPipeliner(t, closing(t, redis.NewClient(o))), proxies: ps}
	}},
	{"cluster, pipelined", func(t *testing.T) *proxied {
		cl := redistest.StartCluster(t, 3)
		ps := proxiesFor(t, cl.Addrs())
		o := cl.Options()
		o.Dialer = faultproxy.Dialer(ps...)
		return &proxied{client: autoPipeliner(t, closing(t, redis.NewClusterClient(o))), proxies: ps}
	}},
	{"cluster with replicas, Replicas 1", func(t *testing.T) *proxied {
		cl := redistest.StartCluster(t, 3, redistest.Replicas(1))
		ps := proxiesFor(t, cl.Addrs())
		o := cl.Options()
		// A cluster client's own node clients do not retry (go-redis sets
		// their MaxRetries to -1 when ClusterOptions.MaxRetries is 0, and
		// retries in the cluster's routing instead). Replicas sends its
		// script and WAIT on the node client itself, past that routing, so
		// a lost reply is sent again only with MaxRetries set: see
		// TestLostReplyClusterReplicasDefaultRetries for the default.
		o.MaxRetries = 3
		o.Dialer = faultproxy.Dialer(ps...)
		return &proxied{client: closing(t, redis.NewClusterClient(o)), proxies: ps, replicas: 1}
	}},
}

func closing[C interface{ Close() error }](t *testing.T, c C) C {
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// scriptOn matches the calls of sc (EVALSHA, or EVAL after NOSCRIPT) whose
// first key is key.
func scriptOn(sc *script.Script, key string) func(faultproxy.Command) bool {
	return func(c faultproxy.Command) bool {
		if len(c.Args) < 4 || c.Args[3] != key {
			return false
		}
		switch c.Name() {
		case "EVALSHA":
			return c.Args[1] == sc.Hash()
		case "EVAL":
			return c.Args[1] == sc.Source
		}
		return false
	}
}

// lostCase is one script call whose reply is lost: prepare brings a fresh
// key to the state the call starts from, act makes the call, next is what
// the owner and another caller do after it. Each returns what it saw, to be
// compared with the same steps run without the fault.
type lostCase struct {
	name   string
	script *script.Script
	// wait loses the reply of the WAIT sent with the script (Options.Replicas)
	// instead of the script's.
	wait    bool
	prepare func(ctx context.Context, t *testing.T, s *lostStores, req Request) *Lease
	act     func(ctx context.Context, s *lostStores, req Request, l *Lease) (string, *Lease)
	next    func(ctx context.Context, s *lostStores, req Request, l *Lease) string
}

// lostStores are the callers of a lost-reply case: the store under test,
// and a store with a short lease to leave behind records whose lease ran out.
type lostStores struct {
	s, short *Store
}

// claimed claims req, failing the test unless the claim owns the key.
func claimed(ctx context.Context, t *testing.T, s *Store, req Request) *Lease {
	t.Helper()
	c, err := s.Claim(ctx, req)
	require.NoError(t, err)
	require.NotNil(t, c.Lease, "claim: %v", c.Status)
	return c.Lease
}

// describeClaim says what a claim got, in terms the caller acts on.
func describeClaim(c *Claim, err error) string {
	switch {
	case errors.Is(err, ErrInProgress):
		return "in progress"
	case err != nil:
		return "error: " + err.Error()
	case c.Status == Replayed:
		return fmt.Sprintf("replayed %d %q", c.Response.Code, c.Response.Body)
	}
	return fmt.Sprintf("%v attempt %d, recovery point %q %q", c.Status, c.Lease.Attempt, c.Lease.RecoveryPoint, c.Lease.RecoveryData)
}

func describeErr(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrLeaseLost):
		return "lease lost"
	}
	return "error: " + err.Error()
}

// describeRecord says what Redis holds for req, leaving out the TTLs.
func describeRecord(ctx context.Context, s *Store, req Request) string {
	rec, err := s.Lookup(ctx, req.Scope, req.Key)
	if err != nil {
		return describeErr(err)
	}
	resp := "none"
	if rec.Response != nil {
		resp = fmt.Sprintf("%d %q", rec.Response.Code, rec.Response.Body)
	}
	return fmt.Sprintf("%s attempt %d, recovery point %q %q, response %s, lease held %t",
		rec.State, rec.Attempt, rec.RecoveryPoint, rec.RecoveryData, resp, rec.LeaseTTL > 0)
}

// otherThenFinish: another caller claims (the owner is alive: in
// progress), the owner completes, and the other caller gets the replay.
func otherThenFinish(ctx context.Context, s *lostStores, req Request, l *Lease) string {
	first := describeClaim(s.s.Claim(ctx, req))
	if l == nil {
		return first + "; the caller holds no lease"
	}
	done := describeErr(l.Complete(ctx, Response{Code: 201, Body: []byte("done")}))
	return first + "; owner completes: " + done + "; then " + describeClaim(s.s.Claim(ctx, req))
}

// claimAct claims req and holds the lease it gets, if any.
func claimAct(ctx context.Context, s *lostStores, req Request, _ *Lease) (string, *Lease) {
	c, err := s.s.Claim(ctx, req)
	if err != nil {
		return describeClaim(c, err), nil
	}
	return describeClaim(c, err), c.Lease
}

func other(ctx context.Context, s *lostStores, req Request, _ *Lease) string {
	return describeClaim(s.s.Claim(ctx, req))
}

var lostCases = []lostCase{
	{
		name:   "claim of a free key",
		script: claimScript,
		act:    claimAct,
		next:   otherThenFinish,
	},
	{
		name:   "claim that takes over",
		script: claimScript,
		prepare: func(ctx context.Context, t *testing.T, s *lostStores, req Request) *Lease {
			l := claimed(ctx, t, s.short, req)
			require.NoError(t, l.Checkpoint(ctx, "charged", []byte("ch_1")))
			require.Eventually(t, func() bool {
				rec, err := s.s.Lookup(ctx, req.Scope, req.Key)
				require.NoError(t, err)
				return rec.LeaseTTL == 0
			}, 10*time.Second, 5*time.Millisecond, "the short lease did not run out")
			return nil
		},
		act:  claimAct,
		next: otherThenFinish,
	},
	{
		name:   "claim of a completed key",
		script: claimScript,
		prepare: func(ctx context.Context, t *testing.T, s *lostStores, req Request) *Lease {
			require.NoError(t, claimed(ctx, t, s.s, req).Complete(ctx, Response{Code: 201, Body: []byte("out")}))
			return nil
		},
		act: func(ctx context.Context, s *lostStores, req Request, _ *Lease) (string, *Lease) {
			return describeClaim(s.s.Claim(ctx, req)), nil
		},
		next: other,
	},
	{
		name:   "claim of a key in progress",
		script: claimScript,
		prepare: func(ctx context.Context, t *testing.T, s *lostStores, req Request) *Lease {
			return claimed(ctx, t, s.s, req)
		},
		act: func(ctx context.Context, s *lostStores, req Request, l *Lease) (string, *Lease) {
			return describeClaim(s.s.Claim(ctx, req)), l
		},
		next: otherThenFinish,
	},
	{
		name:   "complete",
		script: completeScript,
		prepare: func(ctx context.Context, t *testing.T, s *lostStores, req Request) *Lease {
			return claimed(ctx, t, s.s, req)
		},
		act: func(ctx context.Context, _ *lostStores, _ Request, l *Lease) (string, *Lease) {
			return describeErr(l.Complete(ctx, Response{Code: 201, Body: []byte("out")})), l
		},
		next: other,
	},
	{
		name:   "release of a fresh claim",
		script: releaseScript,
		prepare: func(ctx context.Context, t *testing.T, s *lostStores, req Request) *Lease {
			return claimed(ctx, t, s.s, req)
		},
		act: func(ctx context.Context, _ *lostStores, _ Request, l *Lease) (string, *Lease) {
			return describeErr(l.Release(ctx)), nil
		},
		next: other, // claimed at once, as attempt 1: no lease left behind
	},
	{
		name:   "release of a claim with history",
		script: releaseScript,
		prepare: func(ctx context.Context, t *testing.T, s *lostStores, req Request) *Lease {
			l := claimed(ctx, t, s.s, req)
			require.NoError(t, l.Checkpoint(ctx, "charged", []byte("ch_1")))
			return l
		},
		act: func(ctx context.Context, _ *lostStores, _ Request, l *Lease) (string, *Lease) {
			return describeErr(l.Release(ctx)), nil
		},
		next: other, // taken over at once, as attempt 2, with the recovery point
	},
	{
		name:   "extend",
		script: extendScript,
		prepare: func(ctx context.Context, t *testing.T, s *lostStores, req Request) *Lease {
			return claimed(ctx, t, s.s, req)
		},
		act: func(ctx context.Context, _ *lostStores, _ Request, l *Lease) (string, *Lease) {
			return describeErr(l.Extend(ctx)), l
		},
		next: otherThenFinish,
	},
	{
		name:   "checkpoint",
		script: checkpointScript,
		prepare: func(ctx context.Context, t *testing.T, s *lostStores, req Request) *Lease {
			return claimed(ctx, t, s.s, req)
		},
		act: func(ctx context.Context, _ *lostStores, _ Request, l *Lease) (string, *Lease) {
			return describeErr(l.Checkpoint(ctx, "charged", []byte("ch_1"))), l
		},
		next: func(ctx context.Context, s *lostStores, req Request, l *Lease) string {
			// The owner gives up after the checkpoint: the next caller
			// resumes from it.
			return "owner releases: " + describeErr(l.Release(ctx)) + "; then " + describeClaim(s.s.Claim(ctx, req))
		},
	},
}

// TestLostReply loses the reply of each script once, on a single node and
// on a cluster, with and without Options.Replicas, and checks that the
// client's re-send changes nothing: the caller's answer, the record, and
// what the owner and the next caller get afterwards are those of the same
// steps without the fault; the script did run twice in Redis.
func TestLostReply(t *testing.T) {
	t.Parallel() // its own servers; mostly waiting on cluster gossip and failovers
	for _, topo := range lostReplyTopologies {
		t.Run(topo.name, func(t *testing.T) {
			p := topo.start(t)
			// NoCollapse: every call asks Redis, as calls from several
			// processes would; the scripts are what is under test.
			opts := Options{Replicas: p.replicas, ReplicaTimeout: time.Second, NoCollapse: true}
			s := newStore(t, backend{client: p.client}, opts)
			opts.Lease = 200 * time.Millisecond
			stores := &lostStores{s: s, short: newStore(t, backend{client: p.client}, opts)}
			// The scripts are loaded on every master by a first run, so
			// that the faults meet EVALSHA.
			for i := range 30 {
				req := Request{Scope: "warm-up", Key: fmt.Sprint("k", i)}
				l := claimed(context.Background(), t, s, req)
				require.NoError(t, l.Extend(context.Background()))
				require.NoError(t, l.Checkpoint(context.Background(), "p", nil))
				require.NoError(t, l.Release(context.Background()))
				require.NoError(t, claimed(context.Background(), t, s, req).Complete(context.Background(), Response{}))
			}
			for _, c := range lostCases {
				t.Run(c.name, func(t *testing.T) { testLostReply(t, p, stores, c) })
				if c.script.Waits && p.replicas > 0 {
					c.wait = true
					t.Run(c.name+", WAIT reply lost", func(t *testing.T) { testLostReply(t, p, stores, c) })
				}
			}
		})
	}
}

// testLostReply runs c twice, on two keys: once as it is and once with the
// reply of its act lost, and compares.
func testLostReply(t *testing.T, p *proxied, s *lostStores, c lostCase) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type seen struct{ act, record, next string }
	run := func(lose bool) seen {
		req := newReq(t)
		var l *Lease
		if c.prepare != nil {
			l = c.prepare(ctx, t, s, req)
		}
		match := scriptOn(c.script, s.s.keys(req.Scope, req.Key).Record())
		if c.wait {
			match = faultproxy.Name("WAIT")
		}
		var sent, lost rules
		if lose {
			sent = p.inject(faultproxy.Fault{Action: faultproxy.Pass, Match: match})
			lost = p.inject(faultproxy.Fault{Action: faultproxy.LoseReply, Match: match, Times: 1})
		}
		got, l := c.act(ctx, s, req, l)
		if lose {
			sent.remove()
			lost.remove()
			require.Equal(t, 1, lost.hits(), "the reply was lost once")
			require.Equal(t, 2, sent.hits(), "the client sent the script again, and Redis ran it twice")
		}
		rec := describeRecord(ctx, s.s, req)
		return seen{got, rec, c.next(ctx, s, req, l)}
	}
	want := run(false)
	got := run(true)
	t.Logf("caller: %s | record: %s | next: %s", want.act, want.record, want.next)
	require.Equal(t, want, got, "a lost reply changed what the caller, Redis or the next caller saw")
}

// TestLostReplyDo loses the reply of every script a run of Store.Do sends
// (claim, extend, checkpoint, complete: each once) and checks that fn ran
// once and every caller after it gets its result.
func TestLostReplyDo(t *testing.T) {
	t.Parallel() // its own servers behind their own proxies, as TestLostReply
	for _, topo := range lostReplyTopologies {
		t.Run(topo.name, func(t *testing.T) {
			if strings.HasSuffix(topo.name, "pipelined") {
				redistest.Long(t) // TestLostReply runs every script on the pipeliner
			}
			p := topo.start(t)
			s := newStore(t, backend{client: p.client}, Options{Lease: 600 * time.Millisecond, Replicas: p.replicas, ReplicaTimeout: time.Second, NoCollapse: true})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			req := newReq(t)
			key := s.keys(req.Scope, req.Key).Record()
			var lost []rules
			for _, sc := range []*script.Script{claimScript, extendScript, checkpointScript, completeScript} {
				lost = append(lost, p.inject(faultproxy.Fault{Action: faultproxy.LoseReply, Match: scriptOn(sc, key), Times: 1}))
			}
			var runs atomic.Int32
			fn := func(ctx context.Context, l *Lease) ([]byte, error) {
				n := runs.Add(1)
				if err := l.Checkpoint(ctx, "charged", []byte("ch_1")); err != nil {
					return nil, Transient(err)
				}
				// Outlive a heartbeat (lease/3), so that extend runs too.
				t0 := time.Now()
				for lost[1].hits() == 0 && time.Since(t0) < 10*time.Second {
					time.Sleep(5 * time.Millisecond)
				}
				return fmt.Appendf(nil, "run %d", n), nil
			}
			r, err := s.Do(ctx, req, fn)
			require.NoError(t, err)
			require.Equal(t, "run 1", string(r.Data))
			require.False(t, r.Replayed)
			for i, rs := range lost {
				require.Equal(t, 1, rs.hits(), "fault %d", i)
			}
			for range 3 {
				again, err := s.Do(ctx, req, fn)
				require.NoError(t, err)
				require.True(t, again.Replayed)
				require.Equal(t, "run 1", string(again.Data))
			}
			require.EqualValues(t, 1, runs.Load(), "fn ran once")
		})
	}
}

// TestLostReplyClusterReplicasDefaultRetries: with Options.Replicas on a
// cluster client built with go-redis's defaults, the store sends each
// script and its WAIT on the master's node client, which does not retry
// (ClusterOptions.MaxRetries 0 gives node clients MaxRetries -1). A lost
// claim reply then reaches the caller as an error (the middleware answers
// 503); the claim is handed back, so the key is free again at once rather
// than held for a lease while nothing runs. A lost complete reply is sent
// again by Complete's own retries.
func TestLostReplyClusterReplicasDefaultRetries(t *testing.T) {
	t.Parallel() // its own servers; mostly waiting on cluster gossip and failovers
	cl := redistest.StartCluster(t, 3, redistest.Replicas(1))
	ps := proxiesFor(t, cl.Addrs())
	o := cl.Options()
	o.Dialer = faultproxy.Dialer(ps...)
	p := &proxied{client: closing(t, redis.NewClusterClient(o)), proxies: ps}
	s := newStore(t, backend{client: p.client}, Options{Lease: time.Minute, Replicas: 1, ReplicaTimeout: time.Second, NoCollapse: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 30 { // load the scripts on every master
		require.NoError(t, claimed(ctx, t, s, Request{Scope: "warm-up", Key: fmt.Sprint("k", i)}).Complete(ctx, Response{}))
	}

	req := newReq(t)
	key := s.keys(req.Scope, req.Key).Record()
	lost := p.inject(faultproxy.Fault{Action: faultproxy.LoseReply, Match: scriptOn(claimScript, key), Times: 1})
	_, err := s.Claim(ctx, req)
	require.Error(t, err, "the lost claim reply is not sent again")
	require.False(t, errors.Is(err, ErrInProgress))
	require.Equal(t, 1, lost.hits())
	var c *Claim
	start := time.Now()
	require.Eventually(t, func() bool {
		c, err = s.Claim(ctx, req)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "the lost claim still holds the key: %v", err)
	t.Logf("the key was free again after %v (lease: 1m)", time.Since(start))
	require.Equal(t, Claimed, c.Status)
	require.Equal(t, 1, c.Lease.Attempt)

	lost = p.inject(faultproxy.Fault{Action: faultproxy.LoseReply, Match: scriptOn(completeScript, key), Times: 1})
	require.NoError(t, c.Lease.Complete(ctx, Response{Code: 201, Body: []byte("out")}))
	require.Equal(t, 1, lost.hits())
	r, err := s.Claim(ctx, req)
	require.NoError(t, err)
	require.Equal(t, Replayed, r.Status)
	require.Equal(t, "out", string(r.Response.Body))
}
