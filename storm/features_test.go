package storm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkey/idemkey/internal/httpflag"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/idemclient"
)

// The lock-only server passes the storm itself: only the late probe sees
// that nothing was stored.
func TestLockOnlyPassesWithoutProbe(t *testing.T) {
	const keys, dups = 3, 4
	lock := newKeyLock(dups)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if lock.enter(key) {
			http.Error(w, "in progress", http.StatusConflict)
			return
		}
		lock.leave(key)
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)

	code, j, stderr := runJSON(t, "--url", srv.URL, "--keys", fmt.Sprint(keys), "--dups", fmt.Sprint(dups), "--no-probe")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "pass", j.Verdict)
	require.False(t, j.Probe.Enabled)
	require.Zero(t, j.Probe.Sent)
}

// With --retry, the duplicates a rate limiter turned away come back for
// their replay.
func TestRetryGetsReplaysPastTheLimiter(t *testing.T) {
	const keys, dups = 4, 5
	srv, fake := newLimitedServer(t, dups, http.StatusTooManyRequests)
	code, j, stderr := runJSON(t, "--url", srv.URL, "--keys", fmt.Sprint(keys), "--dups", fmt.Sprint(dups), "--retry")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "pass", j.Verdict)
	require.Equal(t, keys, fake.Executions())
	require.Equal(t, keys, j.Originals)
	require.Equal(t, keys*(dups-1), j.Replays, "every turned-away duplicate got its replay")
	require.Equal(t, j.StatusCounts["429"], j.Retries, "every 429 was retried")
	require.Equal(t, j.RetryLater, j.Retries)
	require.GreaterOrEqual(t, j.Retries, keys*(dups-1))
}

// --retry stops at --timeout: a server that only answers 503 leaves every
// key inconclusive, in bounded time.
func TestRetryStopsAtTimeout(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Retry-After", "0.05")
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)

	start := time.Now()
	code, j, stderr := runJSON(t, "--url", srv.URL, "--keys", "2", "--dups", "2", "--retry", "--timeout", "400ms")
	require.Equal(t, 1, code, stderr)
	require.Equal(t, "inconclusive", j.Verdict)
	require.Equal(t, 2, j.KeysInconclusive)
	require.Positive(t, j.Retries)
	requireCutAttemptsCounted(t, j, requests.Load())
	// The bound is the behaviour: --timeout (400ms) ends the retries;
	// 10s is 25x.
	require.Less(t, time.Since(start), 10*time.Second)
	require.Len(t, j.Inconclusive, 2)
	for _, k := range j.Inconclusive {
		require.Contains(t, k.Reason, "no final answer")
	}
}

// requireCutAttemptsCounted checks the accounting of a storm against a
// server that only answers 503: every attempt is a retry-later answer or,
// when --timeout cut it (on a slow machine the last attempt of a request
// may start just before its timeout), a transport error; the server saw
// every answered attempt, and a cut one only if it got that far.
func requireCutAttemptsCounted(t *testing.T, j jsonOut, atServer int64) {
	t.Helper()
	require.Equal(t, j.Requests, j.RetryLater+j.TransportErrors)
	require.Equal(t, j.Requests, j.Responses+j.TransportErrors)
	require.GreaterOrEqual(t, atServer, int64(j.RetryLater))
	require.LessOrEqual(t, atServer, int64(j.Requests))
}

// The cause of TestRetryStopsAtTimeout's flakes ("expected: 32, actual:
// 31"), made certain: an attempt that --timeout cuts is sent and counted,
// as a transport error, but never answered.
func TestRetryAttemptCutByTimeout(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		seen[key]++
		n := seen[key]
		mu.Unlock()
		if n == 3 { // the third attempt outlives the request's timeout
			<-r.Context().Done()
			return
		}
		w.Header().Set("Retry-After", "0")
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)

	code, j, stderr := runJSON(t, "--url", srv.URL, "--keys", "2", "--dups", "1", "--retry", "--timeout", "300ms")
	require.Equal(t, 1, code, stderr)
	require.Equal(t, "inconclusive", j.Verdict)
	require.Equal(t, 6, j.Requests, "two answered attempts and one cut, per key")
	require.Equal(t, 4, j.RetryLater)
	require.Equal(t, 2, j.TransportErrors)
	requireCutAttemptsCounted(t, j, requests.Load())
}

// --retry asks again after a transport error, with the same key.
func TestRetryAfterTransportError(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	fake := &idempotentServer{entries: map[string]*entry{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		seen[key]++
		first := seen[key] == 1
		mu.Unlock()
		if first {
			// Drop the connection without an answer.
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	code, j, stderr := runJSON(t, "--url", srv.URL, "--keys", "3", "--dups", "1")
	require.Equal(t, 2, code, "without --retry, not a single answer: %s", stderr)
	require.Equal(t, "inconclusive", j.Verdict)
	require.Equal(t, 3, j.TransportErrors)

	// The retry gets the original: but the lost attempt may have run as
	// well, for all the answers can tell, so at most once is unproven.
	code, j, stderr = runJSON(t, "--url", srv.URL, "--keys", "3", "--dups", "1", "--retry")
	require.Equal(t, 1, code, stderr)
	require.Equal(t, "inconclusive", j.Verdict)
	require.Equal(t, 3, j.KeysUnproven)
	require.Equal(t, 3, j.TransportErrors)
	require.Equal(t, 3, j.Retries)
	require.Equal(t, 3, j.Originals)
	require.Equal(t, 3, j.Probe.Identical, "unproven keys are probed")
	for _, f := range j.Inconclusive {
		require.Equal(t, RuleAtMostOnce, f.Rule)
		require.Contains(t, f.Reason, "unproven: 1 execution, and 1 lost attempt (transport error sent at")
	}
}

// countServer serves a correct or a double-executing payments endpoint and
// GET /stats with {"stats": {"charges": N}}.
type countServer struct {
	charges atomic.Int64
	// chargeEveryRequest makes every request charge, while the answers stay
	// those of a correct server: the first is stored and replayed.
	chargeEveryRequest bool
	statsDown          atomic.Bool

	mu      sync.Mutex
	answers map[string][]byte
}

func (s *countServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/stats" {
		if s.statsDown.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, `{"stats": {"charges": %d}, "version": "1"}`, s.charges.Load())
		return
	}
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	defer s.mu.Unlock() // one request at a time: no 409s to think about
	stored, ok := s.answers[key]
	if !ok || s.chargeEveryRequest {
		n := s.charges.Add(1)
		if !ok {
			stored = fmt.Appendf(nil, `{"charge":"ch_%d"}`, n)
			s.answers[key] = stored
		}
	}
	if ok {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(stored)
}

func newCountServer(t *testing.T, chargeEveryRequest bool) (*httptest.Server, *countServer) {
	t.Helper()
	cs := &countServer{chargeEveryRequest: chargeEveryRequest, answers: map[string][]byte{}}
	cs.charges.Store(1000) // charges made before the storm
	srv := httptest.NewServer(cs)
	t.Cleanup(srv.Close)
	return srv, cs
}

func TestCountCheck(t *testing.T) {
	const keys, dups = 5, 4
	t.Run("correct server", func(t *testing.T) {
		srv, _ := newCountServer(t, false)
		code, j, stderr := runJSON(t, "--url", srv.URL+"/pay", "--keys", fmt.Sprint(keys), "--dups", fmt.Sprint(dups),
			"--count-url", srv.URL+"/stats", "--count-field", "stats.charges")
		require.Equal(t, 0, code, stderr)
		require.Equal(t, "pass", j.Verdict)
		require.NotNil(t, j.Count)
		require.Equal(t, int64(1000), j.Count.Before)
		require.Equal(t, int64(1000+keys), *j.Count.After)
		require.Equal(t, int64(keys), *j.Count.Delta)
		require.Equal(t, keys, j.Count.Want)
	})
	t.Run("double execution behind perfect replays", func(t *testing.T) {
		srv, cs := newCountServer(t, true)
		// Without the count check, its answers look perfect.
		code, j, stderr := runJSON(t, "--url", srv.URL+"/pay", "--keys", fmt.Sprint(keys), "--dups", fmt.Sprint(dups))
		require.Equal(t, 0, code, stderr)
		require.Equal(t, "pass", j.Verdict)

		before := cs.charges.Load()
		code, j, stderr = runJSON(t, "--url", srv.URL+"/pay", "--keys", fmt.Sprint(keys), "--dups", fmt.Sprint(dups),
			"--count-url", srv.URL+"/stats", "--count-field", "stats.charges")
		require.Equal(t, 1, code, stderr)
		require.Equal(t, "fail", j.Verdict)
		require.Equal(t, keys, j.KeysPassed, "every answer looked right")
		require.Equal(t, before, j.Count.Before)
		require.Equal(t, int64(keys*(dups+1)), *j.Count.Delta, "every duplicate and the probe charged")

		code, stdout, _ := runCommand(t, "--url", srv.URL+"/pay", "--keys", "2", "--dups", "2",
			"--count-url", srv.URL+"/stats", "--count-field", "stats.charges")
		require.Equal(t, 1, code)
		require.Regexp(t, `count +stats\.charges: 2 operations, 6 stats\.charges \(3\.00 each; want 1\) != 2 for 2 keys that ran; [\d,]+ before, [\d,]+ after\n`, stdout)
		require.Contains(t, stdout, "verdict: FAIL (stats.charges grew by 6 for 2 operations, want 2)")
	})
	t.Run("unreadable before", func(t *testing.T) {
		srv, cs := newCountServer(t, false)
		cs.statsDown.Store(true)
		history := filepath.Join(t.TempDir(), "h.jsonl")
		code, stdout, stderr := runCommand(t, "--url", srv.URL+"/pay", "--count-url", srv.URL+"/stats", "--count-field", "stats.charges",
			"--history", history)
		require.Equal(t, 2, code)
		require.Empty(t, stdout)
		require.Contains(t, stderr, "status 503")
		require.Equal(t, int64(1000), cs.charges.Load(), "nothing was sent")
		require.NoFileExists(t, history, "no storm, no history")
	})
	t.Run("no such field", func(t *testing.T) {
		srv, cs := newCountServer(t, false)
		code, _, stderr := runCommand(t, "--url", srv.URL+"/pay", "--count-url", srv.URL+"/stats", "--count-field", "charges")
		require.Equal(t, 2, code)
		require.Contains(t, stderr, `no member "charges"`)
		require.Equal(t, int64(1000), cs.charges.Load())
	})
}

func TestCountUnreadableAfterIsInconclusive(t *testing.T) {
	cs := &countServer{answers: map[string][]byte{}}
	var reads atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stats" && reads.Add(1) > 1 {
			http.Error(w, "gone", http.StatusBadGateway)
			return
		}
		cs.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	code, j, stderr := runJSON(t, "--url", srv.URL+"/pay", "--keys", "2", "--dups", "2",
		"--count-url", srv.URL+"/stats", "--count-field", "stats.charges")
	require.Equal(t, 1, code, stderr)
	require.Equal(t, "inconclusive", j.Verdict)
	require.Equal(t, 2, j.KeysPassed)
	require.Nil(t, j.Count.After)
	require.Contains(t, j.Count.Error, "status 502")
}

func TestCountField(t *testing.T) {
	doc := []byte(`{"a": 7, "b": {"c": 12, "d": "x", "e": 3.0, "f": 2.5, "g": [1]}, "big": 9007199254740993}`)
	for field, want := range map[string]int64{"a": 7, "b.c": 12, "b.e": 3, "big": 9007199254740993} {
		n, err := httpflag.CountField(doc, field)
		require.NoError(t, err, field)
		require.Equal(t, want, n, field)
	}
	for field, msg := range map[string]string{
		"z":     `no member "z"`,
		"b":     "not a number",
		"b.d":   "not a number",
		"b.f":   "not an integer",
		"b.g":   "not a number",
		"a.b":   "not inside an object",
		"b.c.d": "not inside an object",
	} {
		_, err := httpflag.CountField(doc, field)
		require.ErrorContains(t, err, msg, field)
	}
	_, err := httpflag.CountField([]byte(`<html>`), "a")
	require.ErrorContains(t, err, "not JSON")
}

// --key-header and the {n} and {key} placeholders, against the real
// middleware scoping callers by X-User and reading the key from
// X-Request-Key.
func TestKeyHeaderAndPlaceholders(t *testing.T) {
	const keys, dups = 6, 3
	type seen struct{ user, key, body, defaultKey string }
	var mu sync.Mutex
	var got []seen
	var executions atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		executions.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"user":%q}`, r.Header.Get("X-User"))
	})
	// record notes what reaches the server, in front of the middleware.
	record := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(strings.NewReader(string(b)))
			mu.Lock()
			got = append(got, seen{user: r.Header.Get("X-User"), key: r.Header.Get("X-Request-Key"), body: string(b),
				defaultKey: r.Header.Get("Idempotency-Key")})
			mu.Unlock()
			next.ServeHTTP(w, r)
		})
	}
	srv := newMiddlewareServer(t, httpmw.Options{
		Header: "X-Request-Key",
		Wait:   10 * time.Second,
		Scope: func(r *http.Request) (string, error) {
			u := r.Header.Get("X-User")
			if u == "" {
				return "", fmt.Errorf("no user")
			}
			return "user:" + u, nil
		},
	}, handler, record)

	code, j, stderr := runJSON(t, "--url", srv.URL, "--keys", fmt.Sprint(keys), "--dups", fmt.Sprint(dups),
		"--key-header", "x-request-key", "-H", "X-User: user-{n}", "-H", "X-Trace: {key}/{n}", "-H", "X-Fixed: same",
		"--body", `{"user":"user-{n}","key":"{key}"}`)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "pass", j.Verdict, "%+v", j.Failures)
	require.Equal(t, int64(keys), executions.Load())

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, keys*(dups+1), "the duplicates and the late probe")
	users := map[string]map[string]int{} // user -> key -> requests
	for _, s := range got {
		require.Regexp(t, `^user-[0-5]$`, s.user)
		require.Regexp(t, uuidRE, s.key)
		require.Empty(t, s.defaultKey, "the key travels in --key-header only")
		var body struct{ User, Key string }
		require.NoError(t, json.Unmarshal([]byte(s.body), &body))
		require.Equal(t, s.user, body.User)
		require.Equal(t, s.key, body.Key)
		if users[s.user] == nil {
			users[s.user] = map[string]int{}
		}
		users[s.user][s.key]++
	}
	require.Len(t, users, keys, "one user per key")
	for user, perKey := range users {
		require.Len(t, perKey, 1, "user %s sent one key", user)
		for _, n := range perKey {
			require.Equal(t, dups+1, n)
		}
	}
}

func TestPlaceholderHeadersArrive(t *testing.T) {
	var mu sync.Mutex
	got := map[string][]string{} // key -> X-Trace values
	hosts := map[string]string{}
	fixed := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		_, again := got[key]
		got[key] = r.Header.Values("X-Trace")
		hosts[key] = r.Host
		fixed[r.Header.Get("X-Fixed")] = true
		mu.Unlock()
		if again {
			w.Header().Set("Idempotent-Replayed", "true")
		}
	}))
	t.Cleanup(srv.Close)

	rep, err := Run(t.Context(), Config{URL: srv.URL, Keys: 3, Dups: 2, Concurrency: 4, KeyPrefix: "p-",
		Header: http.Header{"X-Fixed": {"same"}, "X-Trace": {"static"}},
		HeaderFor: func(key string, i int) http.Header {
			return http.Header{"x-trace": {"a-" + key, fmt.Sprint("b-", i)}, "Host": {fmt.Sprintf("tenant-%d.example", i)}}
		}})
	require.NoError(t, err)
	require.True(t, rep.Pass(), "%+v %+v", rep.Failures, rep.Inconclusive)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 3)
	idx := map[string]bool{}
	for key, values := range got {
		require.True(t, strings.HasPrefix(key, "p-"))
		require.Len(t, values, 2, "HeaderFor replaces Header's X-Trace")
		require.Equal(t, "a-"+key, values[0])
		idx[values[1]] = true
		require.Equal(t, "tenant-"+strings.TrimPrefix(values[1], "b-")+".example", hosts[key])
	}
	require.Equal(t, map[string]bool{"b-0": true, "b-1": true, "b-2": true}, idx)
	require.Equal(t, map[string]bool{"same": true}, fixed)

	_, err = Run(t.Context(), Config{URL: srv.URL, HeaderFor: func(string, int) http.Header {
		return http.Header{"X-Bad": {"a\r\nb"}}
	}})
	require.ErrorIs(t, err, ErrInvalidConfig)
}

func TestTemplates(t *testing.T) {
	require.Equal(t, "user-7 k-1 {x} 7", expand("user-{n} {key} {x} {n}", "k-1", 7))
	require.Equal(t, "plain", expand("plain", "k", 1))

	body, bodyFor := bodyTemplate([]byte(`{"a":1}`))
	require.Nil(t, bodyFor)
	require.Equal(t, `{"a":1}`, string(body))
	body, bodyFor = bodyTemplate([]byte(`{"n":{n},"key":"{key}"}`))
	require.Nil(t, body)
	require.Equal(t, `{"n":3,"key":"abc"}`, string(bodyFor("abc", 3)))

	fixed, headerFor := headerTemplate(http.Header{"A": {"1"}})
	require.Nil(t, headerFor)
	require.Equal(t, http.Header{"A": {"1"}}, fixed)
	fixed, headerFor = headerTemplate(http.Header{"A": {"1"}, "B": {"x", "u-{n}"}})
	require.Equal(t, http.Header{"A": {"1"}}, fixed)
	require.Equal(t, http.Header{"B": {"x", "u-2"}}, headerFor("k", 2))
}

func TestRunCountConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"field alone":   {URL: "http://127.0.0.1:1", CountField: "n"},
		"url alone":     {URL: "http://127.0.0.1:1", CountURL: "http://127.0.0.1:1/stats"},
		"bad count url": {URL: "http://127.0.0.1:1", CountURL: "/stats", CountField: "n"},
		"key header":    {URL: "http://127.0.0.1:1", KeyHeader: "Bad Header"},
		"key prefix":    {URL: "http://127.0.0.1:1", KeyPrefix: "a b"},
		"comma prefix":  {URL: "http://127.0.0.1:1", KeyPrefix: "a,b-"}, // a bare key with a comma is refused (400)
	} {
		t.Run(name, func(t *testing.T) {
			rep, err := Run(t.Context(), cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.Nil(t, rep)
		})
	}
}

// A key whose answer was lost is inconclusive, and it may have run once:
// the count may grow by the keys that passed plus up to one per
// inconclusive key without failing the storm (which stays inconclusive);
// more than that means a key ran twice.
func TestCountWithInconclusiveKeys(t *testing.T) {
	var charges atomic.Int64
	var mu sync.Mutex
	seen := map[string]int{}
	var lost atomic.Int64
	chargeTwice := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stats" {
			fmt.Fprintf(w, `{"charges": %d}`, charges.Load())
			return
		}
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		seen[key]++
		n := seen[key]
		twice := chargeTwice
		mu.Unlock()
		if n == 1 || twice {
			charges.Add(1)
		}
		if n == 1 && lost.Add(1) <= 2 {
			// The first two keys run, and their answer is lost half-way,
			// so that the client's transport cannot send it again.
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"ok"`)
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
			return
		}
		if n > 1 {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(srv.Close)

	// --settle 0: the server charges before it answers, nothing runs on
	// behind the lost answers.
	args := []string{"--url", srv.URL + "/pay", "--keys", "6", "--dups", "1", "--concurrency", "1",
		"--count-url", srv.URL + "/stats", "--count-field", "charges", "--settle", "0"}
	code, j, stderr := runJSON(t, args...)
	require.Equal(t, 1, code, stderr)
	require.Equal(t, "inconclusive", j.Verdict, "two lost answers, one charge each: not a failure")
	require.Equal(t, 4, j.KeysPassed)
	require.Equal(t, 2, j.KeysInconclusive)
	require.Equal(t, int64(6), *j.Count.Delta)

	mu.Lock()
	chargeTwice, seen = true, map[string]int{}
	mu.Unlock()
	lost.Store(0)
	code, j, stderr = runJSON(t, args...)
	require.Equal(t, 1, code, stderr)
	require.Equal(t, "fail", j.Verdict, "the probes charged again: more than one charge per key")
	require.Greater(t, *j.Count.Delta, int64(6))
}

// slowChargeServer runs a key's first attempt past the client's attempt
// timeout, without a lock: the retry runs it again at once, stores and
// answers; the first run charges later, once the late probe has come
// (plus chargeDelay), still running on the server behind the client's
// timeout. Its answers cannot show the second charge; a count read at
// once after the probe cannot either (delta 1 for one key: the unproven
// key looks proven), a count read Settle later does.
type slowChargeServer struct {
	charges     atomic.Int64
	chargeDelay time.Duration
	mu          sync.Mutex
	arrivals    map[string]int
	probed      map[string]chan struct{}
	stored      map[string][]byte
}

func (s *slowChargeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/stats" {
		fmt.Fprintf(w, `{"charges": %d}`, s.charges.Load())
		return
	}
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.arrivals[key]++
	n := s.arrivals[key]
	if s.probed[key] == nil {
		s.probed[key] = make(chan struct{})
	}
	probed := s.probed[key]
	body, stored := s.stored[key]
	if n == 3 {
		close(probed)
	}
	s.mu.Unlock()
	switch {
	case n == 1:
		// The slow first run: its client gives up; it charges once the
		// probe has come, a little later (bounded, should the storm be
		// broken).
		select {
		case <-probed:
			time.Sleep(s.chargeDelay)
		case <-time.After(10 * time.Second):
		}
		s.charges.Add(1)
		return
	case stored:
		w.Header().Set("Idempotent-Replayed", "true")
	default:
		s.charges.Add(1)
		body = []byte(`{"charge":1}`)
		s.mu.Lock()
		s.stored[key] = body
		s.mu.Unlock()
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
}

func TestSettleCountsExecutionsStillRunningBehindClientTimeouts(t *testing.T) {
	fake := &slowChargeServer{chargeDelay: 200 * time.Millisecond, arrivals: map[string]int{}, probed: map[string]chan struct{}{},
		stored: map[string][]byte{}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	// One operation: its first attempt times out, the retry is stored, the
	// probe gets the replay; the first run charges 200ms after the probe,
	// Settle (2s, ten times that) after the last attempt the count sees it.
	// Without Settle the count was read at once: 1 charge for one
	// unproven key, which it then proved, and the storm passed.
	const settle = 2 * time.Second
	var history bytes.Buffer
	rep, err := Run(t.Context(), Config{URL: srv.URL, Rate: 10, Duration: 100 * time.Millisecond, AttemptTimeout: 100 * time.Millisecond,
		Policy: idemclient.Policy{BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}, Settle: settle,
		CountURL: srv.URL + "/stats", CountField: "charges", History: &history})
	require.NoError(t, err)
	require.Equal(t, VerdictFail, rep.Verdict(), "%s", rep.Counts[0].String())
	require.Equal(t, int64(2), rep.Count.Delta(), "both runs counted")

	written := history.String()
	h, err := ReadHistory(&history)
	require.NoError(t, err)
	require.Equal(t, settle, h.Header.Settings.Settle)
	var last time.Duration
	for _, a := range h.Operations[0].Attempts {
		last = max(last, a.Done)
	}
	read := h.Counts["charges"].At
	require.GreaterOrEqual(t, read, last+settle, "read_ns: the counts were read Settle after the last attempt")
	require.Contains(t, written, fmt.Sprintf(`,"read_ns":%d}`, int64(read)))
}
