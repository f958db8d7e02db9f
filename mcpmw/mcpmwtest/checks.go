package mcpmwtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/mcpmw"
)

// kit is one run: its config, its sessions, and what the checks saw.
type kit struct {
	cfg      Config
	perRun   int // Config.SideEffectsPerRun, or 1
	mu       sync.Mutex
	sessions map[string]*mcp.ClientSession
	closers  []func()
	key      string              // the concurrency check's key
	orig     *mcp.CallToolResult // the original result the later checks compare with
	start    int                 // SideEffects before the first keyed check
	counted  bool                // start was read

	drop dropper // the lost-response check's
}

// session returns the session of caller, connecting it the first time.
func (k *kit) session(ctx context.Context, caller string) (*mcp.ClientSession, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if cs := k.sessions[caller]; cs != nil {
		return cs, nil
	}
	var cs *mcp.ClientSession
	var ct mcp.Transport
	var err error
	if k.cfg.Transport != nil {
		ct, err = k.cfg.Transport(ctx, caller)
	} else {
		var st *mcp.InMemoryTransport
		st, ct = mcp.NewInMemoryTransports()
		var ss *mcp.ServerSession
		if ss, err = k.cfg.Server.Connect(ctx, st, nil); err == nil {
			k.closers = append(k.closers, func() { _ = ss.Close() })
		}
	}
	if err == nil {
		cs, err = mcp.NewClient(&mcp.Implementation{Name: caller, Version: "mcpmwtest"}, nil).Connect(ctx, dropTransport{ct, &k.drop}, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("connecting as %q: %w", caller, err)
	}
	k.closers = append(k.closers, func() { _ = cs.Close() })
	k.sessions[caller] = cs
	return cs, nil
}

// call calls the tool once as caller with key ("" for none) and args.
func (k *kit) call(ctx context.Context, caller, key string, args map[string]any) answer {
	return k.callMeta(ctx, caller, args, func(m mcp.Meta) {
		if key != "" {
			m[mcpmw.MetaKey] = key
		}
	})
}

func (k *kit) callMeta(ctx context.Context, caller string, args map[string]any, meta func(mcp.Meta)) answer {
	cs, err := k.session(ctx, caller)
	if err != nil {
		return answer{err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	defer cancel()
	m := mcp.Meta{}
	meta(m)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: k.cfg.Tool, Arguments: args, Meta: m})
	return answer{res: res, err: err}
}

// untilFinal calls, and calls again after each in-progress answer's delay
// (bounded by Config.Timeout), until an answer that is not one; it
// returns every attempt.
func (k *kit) untilFinal(ctx context.Context, caller, key string, args map[string]any) []answer {
	deadline := time.Now().Add(k.cfg.Timeout)
	var out []answer
	for range 1000 {
		a := k.call(ctx, caller, key, args)
		out = append(out, a)
		d, retry := mcpmw.RetryAfter(a.res)
		if a.err != nil || !retry || time.Now().Add(d).After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return out
		case <-time.After(d):
		}
	}
	return out
}

// count reads SideEffects.
func (k *kit) count() int { return k.cfg.SideEffects() }

// rpcError reports whether a is a JSON-RPC error, and its code.
func rpcError(a answer) (int64, bool) {
	var we *jsonrpc.Error
	if errors.As(a.err, &we) {
		return we.Code, true
	}
	return 0, false
}

// refused judges an answer that must be a refusal: a JSON-RPC error, no
// side effect.
func (k *kit) refused(t tester, what string, a answer, before int) {
	t.Helper()
	if _, ok := rpcError(a); !ok {
		t.Errorf("mcpmwtest: %s: want a JSON-RPC error (invalid params), got %s", what, a.describe())
	}
	if n := k.count() - before; n != 0 {
		t.Errorf("mcpmwtest: %s: SideEffects rose by %d; a refused call must do nothing", what, n)
	}
}

func (k *kit) missingKey(ctx context.Context, t tester) {
	t.Helper()
	if k.cfg.OptionalKey {
		t.Skipf("mcpmwtest: check missing-key skipped: Config.OptionalKey: the server runs calls without a key")
		return
	}
	before := k.count()
	k.refused(t, "a call without a key", k.call(ctx, k.cfg.Caller, "", k.cfg.Arguments), before)
}

func (k *kit) malformedKey(ctx context.Context, t tester) {
	t.Helper()
	long := newKey() + "-" + strings.Repeat("x", 300)
	long = long[:300]
	tab := newKey()
	tab = tab[:8] + "\t" + tab[9:]
	for _, c := range []struct{ what, key string }{{"a 300-character key", long}, {"a key with a tab", tab}} {
		before := k.count()
		k.refused(t, c.what, k.call(ctx, k.cfg.Caller, c.key, k.cfg.Arguments), before)
	}
}

func (k *kit) concurrency(ctx context.Context, t tester) {
	t.Helper()
	k.key = newKey()
	k.start, k.counted = k.count(), true
	copies := make([][]answer, k.cfg.Parallel)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range copies {
		wg.Go(func() {
			<-gate
			copies[i] = k.untilFinal(ctx, k.cfg.Caller, k.key, k.cfg.Arguments)
		})
	}
	close(gate)
	wg.Wait()
	originals, replays, inProgress := 0, 0, 0
	var problems []string
	for i, attempts := range copies {
		for j, a := range attempts {
			_, retry := mcpmw.RetryAfter(a.res)
			switch {
			case a.err != nil:
				problems = append(problems, fmt.Sprintf("copy %d attempt %d: %s", i+1, j+1, a.describe()))
			case retry:
				inProgress++
			case mcpmw.Replayed(a.res):
				replays++
			default:
				originals++
				if k.orig == nil {
					k.orig = a.res
				}
			}
		}
		last := attempts[len(attempts)-1]
		if _, retry := mcpmw.RetryAfter(last.res); retry {
			problems = append(problems, fmt.Sprintf("copy %d: still in progress after %d attempts within %s", i+1, len(attempts), k.cfg.Timeout))
		}
	}
	ref := k.orig
	for i, attempts := range copies {
		last := attempts[len(attempts)-1]
		if ref != nil && last.err == nil && !same(ref, last.res) {
			problems = append(problems, fmt.Sprintf("copy %d's final result differs from the original: %s", i+1, last.describe()))
		}
	}
	ran := k.count() - k.start
	if originals != 1 {
		t.Errorf("mcpmwtest: check concurrency failed for %s: %d copies at once with one key got %d original results (want 1: the others replays or in progress)", k.cfg.Tool, k.cfg.Parallel, originals)
	}
	if ran != k.perRun {
		t.Errorf("mcpmwtest: check concurrency failed for %s: SideEffects rose by %d for %d copies with one key (want %d, one run's)", k.cfg.Tool, ran, k.cfg.Parallel, k.perRun)
	}
	for _, p := range problems {
		t.Errorf("mcpmwtest: check concurrency: %s", p)
	}
	t.Logf("mcpmwtest: concurrency: %d copies: %d original, %d replays, %d in progress (retried after the delay); SideEffects %+d", k.cfg.Parallel, originals, replays, inProgress, ran)
}

func (k *kit) replay(ctx context.Context, t tester) {
	t.Helper()
	if k.orig == nil {
		t.Fatalf("mcpmwtest: check replay: no original result to compare with (see concurrency)")
		return
	}
	before := k.count()
	attempts := k.untilFinal(ctx, k.cfg.Caller, k.key, k.cfg.Arguments)
	a := attempts[len(attempts)-1]
	switch {
	case a.err != nil || !mcpmw.Replayed(a.res):
		t.Errorf("mcpmwtest: check replay failed for %s: the same call again is not marked _meta.%s: true: %s", k.cfg.Tool, mcpmw.MetaReplayed, a.describe())
	case !same(k.orig, a.res):
		t.Errorf("mcpmwtest: check replay failed for %s: the replay differs from the original: %s", k.cfg.Tool, a.describe())
	}
	if n := k.count() - before; n != 0 {
		t.Errorf("mcpmwtest: check replay failed for %s: SideEffects rose by %d", k.cfg.Tool, n)
	}
}

func (k *kit) mismatch(ctx context.Context, t tester) {
	t.Helper()
	if k.cfg.OtherArguments == nil {
		t.Skipf("mcpmwtest: check mismatch skipped: no Config.OtherArguments, and no string or number in Config.Arguments to change")
		return
	}
	before := k.count()
	k.refused(t, "the same key with other arguments", k.call(ctx, k.cfg.Caller, k.key, k.cfg.OtherArguments), before)
	again := k.call(ctx, k.cfg.Caller, k.key, k.cfg.Arguments)
	if again.err != nil || !mcpmw.Replayed(again.res) || !same(k.orig, again.res) {
		t.Errorf("mcpmwtest: check mismatch failed for %s: after the refusal, the original call no longer replays the original result: %s", k.cfg.Tool, again.describe())
	}
}

func (k *kit) sideEffects(_ context.Context, t tester) {
	t.Helper()
	if !k.counted {
		t.Fatalf("mcpmwtest: check side-effects: the concurrency check did not run")
		return
	}
	if n := k.count() - k.start; n != k.perRun {
		t.Errorf("mcpmwtest: check side-effects failed for %s: one call (concurrent copies, a replay, a reuse of its key) made %d side effects (want %d, one run's)", k.cfg.Tool, n, k.perRun)
	}
}

func (k *kit) lostResponse(ctx context.Context, t tester) {
	t.Helper()
	key := newKey()
	before := k.count()
	dropped := k.drop.arm(key)
	defer k.drop.disarm()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan answer, 1)
	go func() { done <- k.call(cctx, k.cfg.Caller, key, k.cfg.Arguments) }()
	var lost []byte
	select {
	case lost = <-dropped:
		cancel() // the caller gives up on the answer it never got
		<-done
	case a := <-done:
		cancel()
		t.Errorf("mcpmwtest: check lost-response for %s: the kit could not drop the response: the call ended before it came: %s", k.cfg.Tool, a.describe())
		return
	}
	var resp struct {
		Result *mcp.CallToolResult `json:"result"`
		Error  json.RawMessage     `json:"error"`
	}
	if err := json.Unmarshal(lost, &resp); err != nil || resp.Result == nil {
		t.Errorf("mcpmwtest: check lost-response failed for %s: the response the kit dropped is not a tool result: %.300s", k.cfg.Tool, lost)
		return
	}
	t.Logf("mcpmwtest: lost-response: dropped the response to the first call (%d bytes) and called again", len(lost))
	a := k.untilFinal(ctx, k.cfg.Caller, key, k.cfg.Arguments)
	last := a[len(a)-1]
	if last.err != nil || !mcpmw.Replayed(last.res) || !same(resp.Result, last.res) {
		t.Errorf("mcpmwtest: check lost-response failed for %s: the retry of a call whose response was lost after the tool ran is not the replay of that response: %s", k.cfg.Tool, last.describe())
	}
	if n := k.count() - before; n != k.perRun {
		t.Errorf("mcpmwtest: check lost-response failed for %s: SideEffects rose by %d for a call whose response was lost and its retry (want %d, one run's)", k.cfg.Tool, n, k.perRun)
	}
}

func (k *kit) sameCaller(ctx context.Context, t tester) {
	t.Helper()
	switch {
	case k.cfg.SameCaller == "":
		t.Skipf("mcpmwtest: check same-caller skipped: no Config.SameCaller")
		return
	case k.orig == nil:
		t.Fatalf("mcpmwtest: check same-caller: no original result to compare with (see concurrency)")
		return
	}
	before := k.count()
	a := k.untilFinal(ctx, k.cfg.SameCaller, k.key, k.cfg.Arguments)
	last := a[len(a)-1]
	if last.err != nil || !mcpmw.Replayed(last.res) || !same(k.orig, last.res) {
		t.Errorf("mcpmwtest: check same-caller failed for %s: %q (Config.SameCaller: %q with another credential) with %q's key did not get the replay: %s. "+
			"The scope follows the credential, not the caller (mcpmw.DefaultScope hashes the Authorization header): set mcpmw's Options.Scope to the authenticated caller",
			k.cfg.Tool, k.cfg.SameCaller, k.cfg.Caller, k.cfg.Caller, last.describe())
	}
	if n := k.count() - before; n != 0 {
		t.Errorf("mcpmwtest: check same-caller failed for %s: SideEffects rose by %d: the call ran again for the same caller", k.cfg.Tool, n)
	}
}

func (k *kit) crashResume(ctx context.Context, t tester) {
	t.Helper()
	if k.cfg.Crash == nil {
		t.Skipf("mcpmwtest: check crash-resume skipped: no Config.Crash")
		return
	}
	key := newKey()
	before := k.count()
	crashed := k.callMeta(ctx, k.cfg.Caller, k.cfg.Arguments, func(m mcp.Meta) {
		k.cfg.Crash(m)
		m[mcpmw.MetaKey] = key
	})
	if crashed.err == nil {
		t.Errorf("mcpmwtest: check crash-resume failed for %s: the first attempt, crashed by Config.Crash, got a result: %s; does Config.Crash make the tool crash (panic)?", k.cfg.Tool, crashed.describe())
		return
	}
	a := k.untilFinal(ctx, k.cfg.Caller, key, k.cfg.Arguments)
	last := a[len(a)-1]
	switch {
	case last.err != nil || last.res.IsError:
		t.Errorf("mcpmwtest: check crash-resume failed for %s: the retry of a crashed call did not complete it: %s", k.cfg.Tool, last.describe())
	case mcpmw.Replayed(last.res):
		t.Errorf("mcpmwtest: check crash-resume failed for %s: the retry of a crashed call got a replay: %s; the crashed attempt stored a result", k.cfg.Tool, last.describe())
	}
	if n := k.count() - before; n != k.perRun {
		t.Errorf("mcpmwtest: check crash-resume failed for %s: SideEffects rose by %d for a crashed call and its retry (want %d, one run's: the retry must resume from the crashed attempt's checkpoint, mcpmw.RecoveryPoint, not do it again)", k.cfg.Tool, n, k.perRun)
	}
}

func (k *kit) scope(ctx context.Context, t tester) {
	t.Helper()
	if k.cfg.OtherCaller == "" {
		t.Skipf("mcpmwtest: check scope skipped: no Config.OtherCaller")
		return
	}
	before := k.count()
	a := k.untilFinal(ctx, k.cfg.OtherCaller, k.key, k.cfg.Arguments)
	last := a[len(a)-1]
	switch {
	case last.err != nil:
		t.Errorf("mcpmwtest: check scope failed for %s: %q with %q's key got %s (want its own run)", k.cfg.Tool, k.cfg.OtherCaller, k.cfg.Caller, last.describe())
	case mcpmw.Replayed(last.res):
		t.Errorf("mcpmwtest: check scope failed for %s: %q with %q's key got %q's result replayed: callers share a scope", k.cfg.Tool, k.cfg.OtherCaller, k.cfg.Caller, k.cfg.Caller)
	}
	if n := k.count() - before; n != k.perRun {
		t.Errorf("mcpmwtest: check scope failed for %s: SideEffects rose by %d for another caller's first call (want %d, one run's)", k.cfg.Tool, n, k.perRun)
	}
}

func (k *kit) ttl(ctx context.Context, t tester) {
	t.Helper()
	if k.cfg.Redis == nil {
		t.Skipf("mcpmwtest: check ttl skipped: no Config.Redis")
		return
	}
	var mu sync.Mutex
	n := 0
	var missing []string
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, globEscape(k.cfg.Prefix)+"*", 1000).Iterator()
		for iter.Next(ctx) {
			ttl, err := c.PTTL(ctx, iter.Val()).Result()
			if err != nil {
				return fmt.Errorf("PTTL %q: %w", iter.Val(), err)
			}
			mu.Lock()
			n++
			if ttl == -1 {
				missing = append(missing, iter.Val())
			}
			over := n > maxRecords
			mu.Unlock()
			if over {
				return fmt.Errorf("over %d keys under %q: give the test a Redis of its own", maxRecords, k.cfg.Prefix)
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := k.cfg.Redis.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, k.cfg.Redis)
	}
	switch {
	case err != nil:
		t.Errorf("mcpmwtest: check ttl: reading Config.Redis: %v", err)
	case n == 0:
		t.Errorf("mcpmwtest: check ttl failed: no key under %q in Config.Redis: is it the store's Redis, and Config.Prefix its prefix?", k.cfg.Prefix)
	}
	for _, key := range missing {
		t.Errorf("mcpmwtest: check ttl failed: %q has no TTL: it would stay in Redis for ever", key)
	}
}

// maxRecords bounds the keys the ttl check reads.
const maxRecords = 100_000

// globEscape escapes the SCAN MATCH pattern characters in s.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
