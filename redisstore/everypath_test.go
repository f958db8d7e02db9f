package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/internal/faultproxy"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/lua"
	"github.com/idemkey/idemkey/redisstore"
)

// The payload check on every path: a key reused for another request gets
// ErrMismatch (HTTP 422) on each path that answers without the plain claim
// in Redis, or beside it. One row per path; TestPayloadCheckMutations
// turns the fingerprint comparison off on one path at a time and shows
// that the table goes red for every path.

// atOnce bounds an answer that must not wait for the running request (a
// mismatch is known at the claim, a round trip of well under a
// millisecond): past it, the answer waited for the run. The bound only
// decides in a mutated build, where the comparison is gone and the
// request waits for the run; it is thousands of times the round trip.
const atOnce = 2 * time.Second

// everyPath are the rows: each starts a request A on a key, then asks
// with the same key and another fingerprint (B) and checks the mismatch.
var everyPath = []struct {
	name string
	run  func(t *testing.T, ctx context.Context, a, b redisstore.Request)
}{
	{"replay_cache", func(t *testing.T, ctx context.Context, a, b redisstore.Request) {
		s := store(t, redistest.Start(t).Client(t), redisstore.Options{ReplayCacheBytes: 1 << 20})
		complete(t, ctx, s, a)
		_, err := s.Claim(ctx, b) // A's outcome is in this process's cache
		require.ErrorIs(t, err, redisstore.ErrMismatch)
	}},
	{"collapse", func(t *testing.T, ctx context.Context, a, b redisstore.Request) {
		client := redistest.Start(t).Client(t)
		hold := &holdClaim{}
		client.AddHook(hold)
		s := store(t, client, redisstore.Options{})
		complete(t, ctx, s, a)
		hold.armed.Store(true)
		again := make(chan error, 1)
		go func() { _, err := s.Claim(ctx, a); again <- err }() // leads the key's flight, held in its claim
		<-hold.entered()
		got := make(chan error, 1)
		go func() { _, err := s.Claim(ctx, b); got <- err }()
		var err error
		deadline := time.After(atOnce)
	wait:
		for {
			select {
			case err = <-got:
				break wait
			case <-deadline:
				t.Fatal("B waited")
			case <-time.After(time.Millisecond):
				if redisstore.FlightWaiting(s, a) > 0 {
					hold.release() // B follows A's flight: let it have A's answer
				}
			}
		}
		hold.release()
		require.NoError(t, <-again)
		require.ErrorIs(t, err, redisstore.ErrMismatch, "B took A's flight's answer")
	}},
	{"lost_reply_reclaim", func(t *testing.T, ctx context.Context, a, b redisstore.Request) {
		srv := redistest.Start(t)
		px := faultproxy.Start(t, srv.Addr())
		o := srv.Options()
		o.Dialer = faultproxy.Dialer(px)
		client := redis.NewClient(o)
		t.Cleanup(func() { _ = client.Close() })
		s := store(t, client, redisstore.Options{})
		complete(t, ctx, s, a)
		name, hash := s.RecordName(b.Scope, b.Key), redis.NewScript(lua.Claim).Hash()
		lost := px.Inject(faultproxy.Fault{Action: faultproxy.LoseReply, Times: 1, Match: func(c faultproxy.Command) bool {
			return c.Name() == "EVALSHA" && len(c.Args) > 3 && c.Args[1] == hash && c.Args[3] == name
		}})
		_, err := s.Claim(ctx, b) // its reply is lost; go-redis sends it again
		require.Equal(t, 1, lost.Hits(), "the reply was lost")
		require.ErrorIs(t, err, redisstore.ErrMismatch)
	}},
	{"pipelined", func(t *testing.T, ctx context.Context, a, b redisstore.Request) {
		s := store(t, redistest.AutoPipeliner(t, redistest.Start(t).Client(t)), redisstore.Options{})
		complete(t, ctx, s, a)
		_, err := s.Claim(ctx, b)
		require.ErrorIs(t, err, redisstore.ErrMismatch)
	}},
	{"legacy_record", func(t *testing.T, ctx context.Context, a, b redisstore.Request) {
		client := redistest.Start(t).Client(t)
		s := store(t, client, redisstore.Options{})
		name := s.RecordName(a.Scope, a.Key) // a record of idemkey before 0.2: a hash
		require.NoError(t, client.HSet(ctx, name, "state", "completed", "fp", a.Fingerprint, "tok", "old-token", "att", 1, "code", 201, "resp", "A's outcome").Err())
		require.NoError(t, client.PExpire(ctx, name, time.Hour).Err())
		_, err := s.Claim(ctx, b)
		require.ErrorIs(t, err, redisstore.ErrMismatch)
	}},
	{"tombstone", func(t *testing.T, ctx context.Context, a, b redisstore.Request) {
		s := store(t, redistest.Start(t).Client(t), redisstore.Options{Lease: 20 * time.Millisecond, Retention: 200 * time.Millisecond, TombstoneRetention: time.Hour})
		complete(t, ctx, s, a)
		require.Eventually(t, func() bool { // the outcome expires; its tombstone stays
			_, err := s.Lookup(ctx, a.Scope, a.Key)
			return errors.Is(err, redisstore.ErrNotFound)
		}, 10*time.Second, 5*time.Millisecond)
		_, err := s.Claim(ctx, b)
		require.ErrorIs(t, err, redisstore.ErrMismatch)
	}},
	{"wait_mode", func(t *testing.T, ctx context.Context, a, b redisstore.Request) {
		s := store(t, redistest.Start(t).Client(t), redisstore.Options{})
		started, release := make(chan struct{}, 1), make(chan struct{})
		h := httpmw.New(s, httpmw.Options{Wait: time.Minute, Scope: httpmw.SharedScope("every path"), Logger: slog.New(slog.DiscardHandler)})(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				started <- struct{}{}
				<-release
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, `{"charge":"A"}`)
			}))
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		post := func(body string) (int, error) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/charges", strings.NewReader(body))
			req.Header.Set("Idempotency-Key", a.Key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return 0, err
			}
			_ = resp.Body.Close()
			return resp.StatusCode, nil
		}
		first := make(chan int, 1)
		go func() { code, _ := post(`{"amount":1}`); first <- code }()
		<-started
		got := make(chan int, 1)
		go func() { code, _ := post(`{"amount":2}`); got <- code }()
		select {
		case code := <-got:
			close(release)
			require.Equal(t, http.StatusUnprocessableEntity, code)
		case <-time.After(atOnce):
			close(release)
			t.Fatalf("B waited for A (got %d)", <-got)
		}
		require.Equal(t, http.StatusCreated, <-first)
	}},
	{"await", func(t *testing.T, ctx context.Context, a, b redisstore.Request) {
		s := store(t, redistest.Start(t).Client(t), redisstore.Options{})
		c, err := s.Claim(ctx, a) // A runs
		require.NoError(t, err)
		actx, cancel := context.WithTimeout(ctx, atOnce)
		defer cancel()
		_, err = s.Await(actx, b)
		require.ErrorIs(t, err, redisstore.ErrMismatch, "B waited for A")
		require.NoError(t, c.Lease.Complete(ctx, redisstore.Response{Code: 201}))
	}},
}

// TestPayloadCheckOnEveryPath: see everyPath.
func TestPayloadCheckOnEveryPath(t *testing.T) {
	var seq atomic.Int64
	for _, row := range everyPath {
		t.Run(row.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			a := redisstore.Request{Scope: "acct", Key: fmt.Sprintf("every-path-%d", seq.Add(1)), Fingerprint: "fp-A"}
			b := a
			b.Fingerprint = "fp-B"
			row.run(t, ctx, a, b)
		})
	}
}

// mutations are the fingerprint comparisons the idemkey_mutate build can
// turn off (IDEMKEY_MUTATE), and the rows each must turn red at least.
var mutations = map[string][]string{
	"cache":     {"replay_cache"},                                                                      // internal/lru
	"collapse":  {"collapse", "wait_mode", "await"},                                                    // internal/collapse
	"claim":     {"replay_cache", "collapse", "lost_reply_reclaim", "pipelined", "wait_mode", "await"}, // claim.lua's record
	"tombstone": {"tombstone"},                                                                         // claim.lua's tombstone
	"legacy":    {"legacy_record"},                                                                     // legacy.lua
}

// TestPayloadCheckMutations: the mutation check. It builds this package's
// tests with the idemkey_mutate tag, and runs TestPayloadCheckOnEveryPath
// once unmutated (green) and once per mutation: each must turn its rows
// red, and together they must turn every row red. A path whose comparison
// nothing tests would stay green here. The runs mostly wait on their
// servers: they run side by side, and beside the package's other tests.
func TestPayloadCheckMutations(t *testing.T) {
	if mutationBuild {
		t.Skip("the mutated build itself")
	}
	t.Parallel()
	redistest.Binary(t) // skips (or fails with IDEMKEY_REQUIRE_REDIS=1) without redis-server
	bin := filepath.Join(t.TempDir(), "redisstore.test")
	build := exec.Command("go", "test", "-c", "-tags", "idemkey_mutate", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the mutated tests:\n%s", out)

	failed := func(mutation string) []string {
		cmd := exec.Command(bin, "-test.run", "^TestPayloadCheckOnEveryPath$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "IDEMKEY_MUTATE="+mutation)
		out, err := cmd.CombinedOutput()
		var rows []string
		for _, m := range regexp.MustCompile(`--- FAIL: TestPayloadCheckOnEveryPath/(\S+)`).FindAllStringSubmatch(string(out), -1) {
			rows = append(rows, m[1])
		}
		if err == nil {
			require.Empty(t, rows)
		} else {
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "running the mutated tests:\n%s", out)
			require.NotEmpty(t, rows, "IDEMKEY_MUTATE=%s: the tests failed, but no row did:\n%s", mutation, out)
		}
		return rows
	}
	names := append([]string{""}, slices.Sorted(maps.Keys(mutations))...)
	results := make([][]string, len(names))
	var wg sync.WaitGroup
	for i, m := range names {
		wg.Go(func() { results[i] = failed(m) })
	}
	wg.Wait()
	require.Empty(t, results[0], "the idemkey_mutate build, unmutated, passes")
	red := map[string]bool{}
	for i, m := range names[1:] {
		rows := results[i+1]
		t.Logf("IDEMKEY_MUTATE=%s: red %v", m, rows)
		for _, want := range mutations[m] {
			require.Contains(t, rows, want, "with the %s comparison off, the %s row stays green", m, want)
		}
		for _, r := range rows {
			red[r] = true
		}
	}
	for _, row := range everyPath {
		require.True(t, red[row.name], "no mutation turns the %s row red", row.name)
	}
}

// store returns a store on client, which logs nothing (these tests use
// Redis as redistest starts it, without persistence).
func store(t *testing.T, client redis.Scripter, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	opts.Logger = slog.New(slog.DiscardHandler)
	s, err := redisstore.New(client, opts)
	require.NoError(t, err)
	return s
}

// complete runs req to completion on s.
func complete(t *testing.T, ctx context.Context, s *redisstore.Store, req redisstore.Request) {
	t.Helper()
	c, err := s.Claim(ctx, req)
	require.NoError(t, err)
	require.NotNil(t, c.Lease)
	require.NoError(t, c.Lease.Complete(ctx, redisstore.Response{Code: 201, Body: []byte("A's outcome")}))
}

// holdClaim is a client hook that, once armed, holds the next script call
// until released.
type holdClaim struct {
	armed   atomic.Bool
	in      chan struct{} // closed when the held call arrives
	out     chan struct{} // closed by release
	outOnce atomic.Bool
}

func (h *holdClaim) init() {
	if h.in == nil {
		h.in, h.out = make(chan struct{}), make(chan struct{})
	}
}

func (h *holdClaim) entered() <-chan struct{} { return h.in }

func (h *holdClaim) release() {
	if h.outOnce.CompareAndSwap(false, true) {
		close(h.out)
	}
}

func (h *holdClaim) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *holdClaim) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	h.init()
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.HasPrefix(cmd.Name(), "eval") && h.armed.CompareAndSwap(true, false) {
			close(h.in)
			<-h.out
		}
		return next(ctx, cmd)
	}
}
func (h *holdClaim) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
