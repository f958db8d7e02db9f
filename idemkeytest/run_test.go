package idemkeytest

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkey/idemkey/internal/refserver"
)

// recorder is a tester that records what a run reports instead of failing
// the test: testing.T cannot be faked, so run takes this small interface.
type recorder struct {
	name    string
	ctx     context.Context
	mu      sync.Mutex
	failed  bool
	skipped bool
	fatal   bool
	logs    []string // Errorf, Fatalf and Skipf messages
	subs    []*recorder
}

func (r *recorder) Helper()                  {}
func (r *recorder) Context() context.Context { return r.ctx }
func (r *recorder) Logf(string, ...any)      {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	r.mu.Lock()
	r.fatal = true
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Skipf(format string, args ...any) {
	r.mu.Lock()
	r.skipped = true
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Run(name string, f func(t tester)) bool {
	sub := &recorder{name: name, ctx: r.ctx}
	r.mu.Lock()
	r.subs = append(r.subs, sub)
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(sub)
	}()
	<-done
	if sub.failed {
		r.mu.Lock()
		r.failed = true
		r.mu.Unlock()
	}
	return !sub.failed
}

// record runs the kit against h on a recorder.
func record(t *testing.T, h http.Handler, cfg Config) *recorder {
	t.Helper()
	r := &recorder{name: t.Name(), ctx: t.Context()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(r, h, cfg)
	}()
	<-done
	return r
}

// results maps each subtest to "ok", "fail" or "skip".
func (r *recorder) results() map[string]string {
	m := map[string]string{}
	for _, s := range r.subs {
		switch {
		case s.failed:
			m[s.name] = "fail"
		case s.skipped:
			m[s.name] = "skip"
		default:
			m[s.name] = "ok"
		}
	}
	return m
}

// message is what subtest name reported.
func (r *recorder) message(name string) string {
	for _, s := range r.subs {
		if s.name == name {
			return strings.Join(s.logs, "\n")
		}
	}
	return ""
}

func (r *recorder) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: failed %v %s\n", r.name, r.failed, strings.Join(r.logs, "\n"))
	for _, s := range r.subs {
		fmt.Fprintf(&b, "  %s: %s\n", s.name, strings.Join(s.logs, "\n    "))
	}
	return b.String()
}

var (
	alice = http.Header{"Authorization": {"Bearer alice"}}
	bob   = http.Header{"Authorization": {"Bearer bob"}}
)

const order = `{"sku": "book", "qty": 1, "gift": false}`

// refConfig is the kit's config for a refserver.
func refConfig(s *refserver.Server) Config {
	return Config{Path: "/pay", Body: []byte(order), Header: alice, OtherHeader: bob,
		SideEffects: func() int { return int(s.Runs()) }, Timeout: 5 * time.Second}
}

// passing is every check's result on a right handler without a Redis or a
// crash hook.
var passing = map[string]string{
	"missing-key": "ok", "malformed-key": "ok", "concurrency": "ok", "replay": "ok", "mismatch": "ok",
	"side-effects": "ok", "lost-response": "ok", "same-caller": "skip", "scope": "ok", "crash-resume": "skip", "ttl": "skip",
}

func TestRunPassesTheReferenceServer(t *testing.T) {
	s := &refserver.Server{}
	r := record(t, s, refConfig(s))
	if r.failed || !mapsEqual(r.results(), passing) {
		t.Fatalf("want every check to pass:\n%s", r)
	}
	// concurrency 1, the fingerprint probes' own key 1, lost-response 1,
	// scope 1 (bob's own).
	if got := s.Runs(); got != 4 {
		t.Errorf("the handler ran %d times, want 4", got)
	}
	if msg := r.message("crash-resume"); !strings.Contains(msg, "no Config.Crash") {
		t.Errorf("crash-resume skipped with %q", msg)
	}
}

// Each broken handler fails the check named for its defect, with a message
// that names the check and says what the handler did.
func TestRunFailsBrokenHandlers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		server *refserver.Server
		failed []string // the checks that fail, sorted
		check  string   // the check named for the defect
		says   []string // in its message
	}{
		{
			name:   "no idempotency",
			server: &refserver.Server{NoIdempotency: true},
			failed: []string{"concurrency", "lost-response", "malformed-key", "mismatch", "missing-key", "replay", "scope", "side-effects"},
			check:  "concurrency",
			says: []string{"idemkeytest: check concurrency failed for POST /pay (key ", "not so: exactly one original: 20 (201 x20)",
				"not so: exactly one side effect: SideEffects +20"},
		},
		{
			name:   "ignores the body",
			server: &refserver.Server{IgnoreBody: true},
			failed: []string{"mismatch"},
			check:  "mismatch",
			says:   []string{"idemkeytest: check mismatch failed", `not so: 422 for the same key with another body ($.qty: 1 -> 2): 201 replayed`},
		},
		{
			name:   "only locks",
			server: &refserver.Server{LockOnly: true, Conflict: "0.1", Hold: 19},
			failed: []string{"concurrency", "lost-response", "mismatch", "replay", "scope", "side-effects"},
			check:  "concurrency",
			says:   []string{"idemkeytest: check concurrency failed", "not so: exactly one original: 20 (201 x20)", "not so: exactly one side effect: SideEffects +20"},
		},
		{
			name:   "replays without Idempotent-Replayed",
			server: &refserver.Server{NoReplayHeader: true},
			failed: []string{"concurrency", "lost-response", "mismatch", "replay", "scope"},
			check:  "replay",
			says:   []string{"idemkeytest: check replay failed", "not so: marked Idempotent-Replayed: true: 201 (application/json, 14 bytes)"},
		},
		{
			name:   "shares a scope across callers",
			server: &refserver.Server{SharedScope: true},
			failed: []string{"scope"},
			check:  "scope",
			says: []string{"idemkeytest: check scope failed",
				"not so: another caller with the same key does not get the first caller's answer: got a stored answer, 201 replayed (application/json, 14 bytes): the first caller's, identical",
				"not so: it ran for the other caller: an original answer, one side effect: 201 replayed; SideEffects +0"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := record(t, tc.server, refConfig(tc.server))
			if !r.failed {
				t.Fatalf("the run passed:\n%s", r)
			}
			var failed []string
			for name, res := range r.results() {
				if res == "fail" {
					failed = append(failed, name)
				}
			}
			slices.Sort(failed)
			if !slices.Equal(failed, tc.failed) {
				t.Errorf("failed checks %q, want %q:\n%s", failed, tc.failed, r)
			}
			msg := r.message(tc.check)
			for _, want := range tc.says {
				if !strings.Contains(msg, want) {
					t.Errorf("the %s message lacks %q:\n%s", tc.check, want, msg)
				}
			}
		})
	}
}

// A replay without Idempotent-Replayed is told apart from a second run by
// the counter.
func TestRunTellsUnmarkedReplaysFromRuns(t *testing.T) {
	s := &refserver.Server{NoReplayHeader: true}
	r := record(t, s, refConfig(s))
	if msg := r.message("concurrency"); !strings.Contains(msg, "SideEffects rose by 1, yet 20 answers were not marked Idempotent-Replayed: true: are replays sent without that header?") {
		t.Errorf("concurrency says:\n%s", msg)
	}
}

func TestRunWithoutOptionalChecks(t *testing.T) {
	s := &refserver.Server{KeyOptional: true}
	cfg := refConfig(s)
	cfg.OtherHeader, cfg.OptionalKey = nil, true
	cfg.Body = []byte("amount=1200") // not JSON: no OtherBody to derive
	r := record(t, s, cfg)
	want := map[string]string{
		"missing-key": "skip", "malformed-key": "ok", "concurrency": "ok", "replay": "ok", "mismatch": "skip",
		"side-effects": "ok", "lost-response": "ok", "same-caller": "skip", "scope": "skip", "crash-resume": "skip", "ttl": "skip",
	}
	if r.failed || !mapsEqual(r.results(), want) {
		t.Fatalf("results %v, want %v:\n%s", r.results(), want, r)
	}
	for name, says := range map[string]string{
		"missing-key": "Config.OptionalKey: the endpoint allows requests without a key",
		"mismatch":    "no Config.OtherBody, and the body is not JSON: give Config.OtherBody",
		"scope":       "no Config.OtherHeader",
	} {
		if msg := r.message(name); !strings.Contains(msg, says) {
			t.Errorf("%s: %q lacks %q", name, msg, says)
		}
	}
}

func TestRunRefusesAnIncompleteConfig(t *testing.T) {
	s := &refserver.Server{}
	for _, tc := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.Path = "" }, "idemkeytest: Config.Path is required"},
		{func(c *Config) { c.Body = nil }, "idemkeytest: Config.Body is required"},
		{func(c *Config) { c.SideEffects = nil }, "idemkeytest: Config.SideEffects is required"},
		{func(c *Config) { c.Path = "http://example.com/pay" }, "Config.Path must be a path starting with /"},
		{func(c *Config) { c.Parallel = 1 }, "Config.Parallel must be 2 to 1000, got 1"},
		{func(c *Config) { c.Header = http.Header{"Idempotency-Key": {"k"}} }, "Config.Header: Idempotency-Key is set by each check"},
	} {
		cfg := refConfig(s)
		tc.change(&cfg)
		r := record(t, s, cfg)
		if !r.fatal || len(r.subs) > 0 || !strings.Contains(strings.Join(r.logs, "\n"), tc.want) {
			t.Errorf("want a fatal %q before any check:\n%s", tc.want, r)
		}
	}
	if s.Runs() != 0 {
		t.Errorf("the handler ran %d times", s.Runs())
	}
}

// A handler that answers nothing stops the run at its first request.
func TestRunStopsWhenTheHandlerNeverAnswers(t *testing.T) {
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })
	r := record(t, h, Config{Path: "/x", Body: []byte("{}"), SideEffects: func() int { return 0 }})
	msg := r.String()
	if !r.failed || !strings.Contains(msg, "unreachable: POST /x: the handler panicked: boom") {
		t.Fatalf("want the run stopped:\n%s", msg)
	}
	if len(r.subs) != 1 {
		t.Errorf("want the run to stop at the first check, got %d subtests", len(r.subs))
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// BodyFor gives each key its own body, the same on every request with that
// key.
func TestRunBodyFor(t *testing.T) {
	s := &refserver.Server{}
	var mu sync.Mutex
	keys := map[string]bool{}
	cfg := refConfig(s)
	cfg.Body = nil
	cfg.BodyFor = func(key string) []byte {
		mu.Lock()
		keys[key] = true
		mu.Unlock()
		return fmt.Appendf(nil, `{"ref": %q, "qty": 1}`, key)
	}
	r := record(t, s, cfg)
	if r.failed || !mapsEqual(r.results(), passing) {
		t.Fatalf("want every check to pass:\n%s", r)
	}
	// "", two malformed keys, concurrency's, the probes', lost-response's.
	if len(keys) != 6 || !keys[""] {
		t.Errorf("BodyFor was asked for %d keys: %v", len(keys), keys)
	}
}
