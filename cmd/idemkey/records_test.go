package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/examples/payments"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

// runCmd runs a command in this process, with stdin answered by answer
// and seen as a terminal when tty is set.
func runCmd(t *testing.T, tty bool, answer string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	oldIn, oldTTY := forgetStdin, forgetStdinIsTerminal
	t.Cleanup(func() { forgetStdin, forgetStdinIsTerminal = oldIn, oldTTY })
	forgetStdin, forgetStdinIsTerminal = strings.NewReader(answer), func() bool { return tty }
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// recordsFixture is a Redis with records in every state under "idem:", as
// a store with a lease under a second leaves them (so that a lease that ran
// out is not taken for live by the grace after a restart: the server is
// young).
type recordsFixture struct {
	srv   *redistest.Server
	rdb   *redis.Client
	store *redisstore.Store
	live  *redisstore.Lease // holds "k-live" in scope "s"
}

func newRecordsFixture(t *testing.T) *recordsFixture {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store, err := redisstore.New(rdb, redisstore.Options{Lease: 900 * time.Millisecond, Heartbeat: 300 * time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	claim := func(scope, key, label string) *redisstore.Lease {
		c, err := store.Claim(ctx, redisstore.Request{Scope: scope, Key: key, Fingerprint: "f", Label: label})
		require.NoError(t, err)
		return c.Lease
	}
	for i := range 3 {
		require.NoError(t, claim(payments.Scope("alice"), "k-done-"+strconv.Itoa(i), "POST /v1/payments").
			Complete(ctx, redisstore.Response{Code: 201, Body: []byte(`{"id":"pay_1"}`)}))
	}
	stuck := claim("s", "k-stuck", "POST /v1/payments/\x1b[2J"+hostile["OSC BEL"])
	require.NoError(t, stuck.Checkpoint(ctx, "charged\a", []byte("ch_1")))
	require.NoError(t, claim("s", "k-released", "POST /v1/refunds").Interrupt(ctx))
	// Another application's keys under the prefix, one with a hostile name.
	require.NoError(t, rdb.RPush(ctx, "idem:jobs", "x").Err())
	require.NoError(t, rdb.Set(ctx, "idem:\x1b]0;owned\x07", "x", time.Hour).Err())
	// The stuck lease runs out; then one that stays live for the test.
	require.Eventually(t, func() bool {
		rec, err := store.Lookup(ctx, "s", "k-stuck")
		require.NoError(t, err)
		return rec.LeaseTTL == 0
	}, 10*time.Second, 10*time.Millisecond)
	live, err := redisstore.New(rdb, redisstore.Options{Lease: time.Minute})
	require.NoError(t, err)
	c, err := live.Claim(ctx, redisstore.Request{Scope: "s", Key: "k-live", Fingerprint: "f", Label: "POST /v1/slow"})
	require.NoError(t, err)
	return &recordsFixture{srv: srv, rdb: rdb, store: store, live: c.Lease}
}

func TestLs(t *testing.T) {
	f := newRecordsFixture(t)
	addr := f.srv.Addr()

	code, out, errOut := runCmd(t, false, "", "ls", "--redis", addr)
	require.Equal(t, 0, code, errOut)
	requireTerminalSafe(t, out)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 1+6+2+1, out)
	require.Regexp(t, `^NAME +STATE +ATTEMPT +AGE +LEASE +TTL +LABEL OR STATUS, RECOVERY$`, lines[0])
	require.Equal(t, 3, strings.Count(out, "  completed  "), out)
	require.Regexp(t, `(?m)^idem:\{[\w-]{22}\}  completed +1 +- +- +\S+  201$`, out)
	require.Regexp(t, `(?m)^idem:\{[\w-]{22}\}  started +1 +\S+ +none +\S+  "POST /v1/payments/\\x1b\[2J\\x1b\]0;owned\\a", recovery "charged\\a"$`, out)
	require.Regexp(t, `(?m)^idem:\{[\w-]{22}\}  released +1 +\S+ +- +\S+  "POST /v1/refunds"$`, out)
	require.Regexp(t, `(?m)^idem:\{[\w-]{22}\}  started +1 +\S+ +[0-9][0-9a-zµ.]* +\S+  "POST /v1/slow"$`, out, "the live lease")
	require.Regexp(t, `(?m)^idem:jobs +not an idemkey record: not a key name idemkey writes \(a list\)$`, out)
	require.Contains(t, out, `"idem:\x1b]0;owned\a"`+" ")
	require.Equal(t, `6 listed of 6 records under "idem:" on 1 server, 2 keys that are not records; 1 SCAN call, the slowest `,
		regexp.MustCompile(`\d+(\.\d+)?[µm]?s$`).ReplaceAllString(lines[len(lines)-1], ""))

	code, out, errOut = runCmd(t, false, "", "ls", "--redis", addr, "--state", "started", "--expired", "--json")
	require.Equal(t, 0, code, errOut)
	var got struct {
		Prefix  string    `json:"prefix"`
		Records []lsEntry `json:"records"`
		Summary lsSummary `json:"summary"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Equal(t, "idem:", got.Prefix)
	require.Len(t, got.Records, 3, "the stuck record, and the two keys that are not records")
	var stuck lsEntry
	for _, e := range got.Records {
		if e.Problem == "" {
			stuck = e
		} else {
			require.Nil(t, e.TTLMS, "no TTL for a key that is not a record")
			require.Empty(t, e.State)
		}
	}
	require.Equal(t, "started", stuck.State)
	require.Equal(t, "charged\a", stuck.RecoveryPoint)
	require.Equal(t, int64(0), *stuck.LeaseTTLMS)
	require.Positive(t, *stuck.TTLMS)
	require.NotNil(t, stuck.CreatedAt)
	require.Positive(t, *stuck.AgeMS)
	require.Regexp(t, `^[0-9a-f]{32}$`, stuck.Fingerprint)
	require.Equal(t, lsSummary{Servers: 1, Keys: 8, Records: 6, Listed: 1, NotRecords: 2, ScanCalls: 1,
		SlowestScanUS: got.Summary.SlowestScanUS}, got.Summary)

	code, out, _ = runCmd(t, false, "", "ls", "--redis", addr, "--state", "completed", "--older", "1h")
	require.Equal(t, 0, code)
	require.Contains(t, out, "0 listed of 6 records", "completed records keep no time")

	for _, args := range [][]string{{"--state", "running"}, {"--older", "-1s"}, {"extra"}, {"--redis", "127.0.0.1:1"}} {
		code, _, errOut := runCmd(t, false, "", append([]string{"ls"}, args...)...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
	}
}

func TestLsOnACluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	store, err := redisstore.New(cl.Client(t), redisstore.Options{})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 60 {
		c, err := store.Claim(ctx, redisstore.Request{Scope: "s", Key: strconv.Itoa(i)})
		require.NoError(t, err)
		require.NoError(t, c.Lease.Complete(ctx, redisstore.Response{Code: 200}))
	}
	code, out, errOut := runCmd(t, false, "", "ls", "--redis", cl.Addrs()[0], "--json")
	require.Equal(t, 0, code, errOut)
	var got struct {
		Records []lsEntry `json:"records"`
		Summary lsSummary `json:"summary"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Len(t, got.Records, 60, "every master's")
	require.Equal(t, 3, got.Summary.Servers)
	servers := map[string]bool{}
	for _, e := range got.Records {
		servers[e.Server] = true
	}
	require.Len(t, servers, 3)
}

func TestForget(t *testing.T) {
	f := newRecordsFixture(t)
	ctx := context.Background()
	base := []string{"forget", "--redis", f.srv.Addr(), "--lease", "900ms"}
	forget := func(tty bool, answer string, args ...string) (int, string, string) {
		return runCmd(t, tty, answer, append(append([]string{}, base...), args...)...)
	}
	exists := func(scope, key string) bool {
		_, err := f.store.Lookup(ctx, scope, key)
		if errors.Is(err, redisstore.ErrNotFound) {
			return false
		}
		require.NoError(t, err)
		return true
	}

	// Without a terminal, and without --yes: refused before anything.
	code, out, errOut := forget(false, "y\n", "--bearer", "alice", "k-done-0")
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.Contains(t, errOut, "stdin is not a terminal, so forget cannot ask before it forgets: pass --yes")
	require.True(t, exists(payments.Scope("alice"), "k-done-0"))

	// Asked, answered no: nothing forgotten.
	for _, answer := range []string{"n\n", "\n", "", "yess\n"} {
		code, _, errOut = forget(true, answer, "--bearer", "alice", "k-done-0")
		require.Equal(t, 3, code, "%q: %s", answer, errOut)
		require.Contains(t, errOut, `The record of key "k-done-0" in scope "tok:`)
		require.Contains(t, errOut, "completed, attempt 1, stored status 201, expires in ")
		require.Contains(t, errOut, "[y/N] ")
		require.Contains(t, errOut, "nothing forgotten")
		require.True(t, exists(payments.Scope("alice"), "k-done-0"))
	}

	// Answered yes: forgotten, and the key runs again.
	code, out, errOut = forget(true, "yes\n", "--bearer", "alice", "k-done-0")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `forgot the record of key "k-done-0"`)
	require.False(t, exists(payments.Scope("alice"), "k-done-0"))
	c, err := f.store.Claim(ctx, redisstore.Request{Scope: payments.Scope("alice"), Key: "k-done-0", Fingerprint: "f"})
	require.NoError(t, err)
	require.Equal(t, redisstore.Claimed, c.Status)
	require.NoError(t, c.Lease.Release(ctx))

	// Gone: exit 1.
	code, _, errOut = forget(false, "", "--yes", "--bearer", "alice", "k-done-0")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "no record for key")

	// A stuck record, its text quoted; the prompt says what forgetting its history means.
	code, out, errOut = forget(true, "y\n", "--scope", "s", "k-stuck")
	require.Equal(t, 0, code, errOut)
	requireTerminalSafe(t, errOut+out)
	require.Contains(t, errOut, `recovery point "charged\a"`)
	require.Contains(t, errOut, "lease ran out")
	require.Contains(t, errOut, "the next request starts over as attempt 1")
	require.False(t, exists("s", "k-stuck"))

	// A released one, with --yes and the flags after KEY.
	code, _, errOut = forget(false, "", "--scope", "s", "k-released", "--yes")
	require.Equal(t, 0, code, errOut)
	require.False(t, exists("s", "k-released"))

	// A live lease: refused without --force, even with --yes.
	code, _, errOut = forget(false, "", "--yes", "--scope", "s", "k-live")
	require.Equal(t, 3, code, errOut)
	require.Contains(t, errOut, "its owner holds a live lease (")
	require.Contains(t, errOut, "pass --force to fence the owner")
	require.True(t, exists("s", "k-live"))

	// Forced: asked with a warning, then the owner is fenced.
	code, _, errOut = forget(true, "y\n", "--force", "--scope", "s", "k-live")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "forcing fences it")
	require.False(t, exists("s", "k-live"))
	require.ErrorIs(t, f.live.Complete(ctx, redisstore.Response{Code: 200}), redisstore.ErrLeaseLost)
	require.False(t, exists("s", "k-live"), "the old owner's late complete brought nothing back")

	// Usage errors.
	for _, args := range [][]string{{"k"}, {"--scope", "s"}, {"--scope", "s", "--bearer", "b", "k"}, {"--scope", "s", "a", "b"},
		{"--scope", "s", "--lease", "0s", "k"}, {"--name", ""}, {"--name", "idem:{x}", "k"}, {"--name", "idem:{x}", "--scope", "s"}} {
		code, _, errOut := forget(true, "", args...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
	}
}

// forget --name forgets a record by its name in Redis, as ls and doctor
// show it, with forget's every rule; every forget prints an audit line
// without scope, key or credential.
func TestForgetByName(t *testing.T) {
	f := newRecordsFixture(t)
	ctx := context.Background()
	base := []string{"forget", "--redis", f.srv.Addr(), "--lease", "900ms"}
	forget := func(tty bool, answer string, args ...string) (int, string, string) {
		return runCmd(t, tty, answer, append(append([]string{}, base...), args...)...)
	}
	audit := regexp.MustCompile(`(?m)^time=\S+ level=INFO msg="idemkey forget: audit: record forgotten" (.*)$`)

	// By scope and key: the audit line names the record, not its key.
	done := f.store.RecordName(payments.Scope("alice"), "k-done-1")
	code, out, errOut := forget(false, "", "--yes", "--bearer", "alice", "k-done-1")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `forgot the record of key "k-done-1"`)
	m := audit.FindStringSubmatch(errOut)
	require.NotNil(t, m, errOut)
	require.Regexp(t, `^name=`+regexp.QuoteMeta(done)+` prefix=idem: forced=false by_name=false redis="`+
		regexp.QuoteMeta(f.srv.Addr())+` db 0" state=completed attempt=1( user=\S+)?$`, m[1])
	require.NotContains(t, errOut, "k-done-1")
	require.NotContains(t, errOut, "alice")
	require.NotContains(t, errOut, payments.Scope("alice"))

	// By name, asked first; the record as ls shows it.
	stuck := f.store.RecordName("s", "k-stuck")
	code, out, errOut = forget(true, "y\n", "--name", stuck)
	require.Equal(t, 0, code, errOut)
	requireTerminalSafe(t, errOut+out)
	require.Contains(t, errOut, "The record of name "+stuck+": started, attempt 1, label ")
	require.Contains(t, errOut, "the next request starts over as attempt 1")
	require.Contains(t, out, "forgot the record of name "+stuck)
	require.Contains(t, errOut, " by_name=true ")
	_, err := f.store.LookupName(ctx, stuck)
	require.ErrorIs(t, err, redisstore.ErrNotFound)
	code, _, errOut = forget(false, "", "--yes", "--name", stuck)
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "no record for name "+stuck)
	require.NotRegexp(t, audit, errOut, "nothing forgotten, nothing audited")

	// A live lease: refused, then forced.
	live := f.store.RecordName("s", "k-live")
	code, _, errOut = forget(false, "", "--yes", "--name", live)
	require.Equal(t, 3, code, errOut)
	require.Contains(t, errOut, "pass --force to fence the owner")
	code, _, errOut = forget(false, "", "--yes", "--force", "--name", live, "--prefix", "idem:")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, audit.FindString(errOut), " forced=true by_name=true ")
	require.ErrorIs(t, f.live.Complete(ctx, redisstore.Response{Code: 200}), redisstore.ErrLeaseLost)

	// Names that are not a record's under --prefix: a usage error, nothing
	// forgotten.
	released := f.store.RecordName("s", "k-released")
	for _, tc := range []struct{ name, prefix, why string }{
		{released + ":t", "idem:", "a tombstone's"},
		{released, "other:", "want the prefix, then a hash tag"},
		{"idem:jobs", "idem:", "want the prefix, then a hash tag"},
		{"idem:\x1b]0;owned\x07", "idem:", "want the prefix"},
	} {
		code, out, errOut := forget(false, "", "--yes", "--prefix", tc.prefix, "--name", tc.name)
		require.Equal(t, 2, code, "%q: %s", tc.name, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, "is not the name of a record under --prefix")
		require.Contains(t, errOut, tc.why)
		requireTerminalSafe(t, errOut)
	}
	_, err = f.store.LookupName(ctx, released)
	require.NoError(t, err, "still there")
}

// The built binary run with stdin on /dev/null (no terminal) refuses
// without --yes, and forgets with it.
func TestForgetBinaryWithoutATerminal(t *testing.T) {
	srv := redistest.Start(t)
	store, err := redisstore.New(srv.Client(t), redisstore.Options{})
	require.NoError(t, err)
	ctx := context.Background()
	c, err := store.Claim(ctx, redisstore.Request{Scope: "s", Key: "k"})
	require.NoError(t, err)
	require.NoError(t, c.Lease.Complete(ctx, redisstore.Response{Code: 200}))

	r := runBin(t, 30*time.Second, "forget", "--redis", srv.Addr(), "--scope", "s", "k")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "stdin is not a terminal")
	_, err = store.Lookup(ctx, "s", "k")
	require.NoError(t, err)

	r = runBin(t, 30*time.Second, "forget", "--redis", srv.Addr(), "--scope", "s", "--yes", "k")
	require.Equal(t, 0, r.code, r.stderr)
	_, err = store.Lookup(ctx, "s", "k")
	require.ErrorIs(t, err, redisstore.ErrNotFound)
}

// doctor lists the oldest stuck records, at most 5, oldest first, each
// with the forget line.
func TestDoctorListsStuckRecords(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store, err := redisstore.New(rdb, redisstore.Options{Prefix: "app:", Lease: 500 * time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 7 {
		c, err := store.Claim(ctx, redisstore.Request{Scope: "s", Key: strconv.Itoa(i), Label: "POST /v1/job/" + strconv.Itoa(i)})
		require.NoError(t, err)
		_ = c // its lease runs out
		for t0 := time.Now().UnixMilli(); time.Now().UnixMilli() == t0; {
			// the next millisecond: distinct first-claim times, in order
		}
	}
	c, err := store.Claim(ctx, redisstore.Request{Scope: "s", Key: "done"})
	require.NoError(t, err)
	require.NoError(t, c.Lease.Complete(ctx, redisstore.Response{Code: 200}))
	require.Eventually(t, func() bool {
		rec, err := store.Lookup(ctx, "s", "6")
		require.NoError(t, err)
		return rec.LeaseTTL == 0
	}, 10*time.Second, 10*time.Millisecond)

	r := runBin(t, 60*time.Second, "doctor", "--json", "--redis", srv.Addr(), "--prefix", "app:")
	require.Equal(t, 0, r.code, r.stderr)
	var rep doctorReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.NotNil(t, rep.Stuck)
	require.Equal(t, 7, rep.Stuck.Found)
	require.Len(t, rep.Stuck.Oldest, 5)
	for i, s := range rep.Stuck.Oldest {
		require.Equal(t, "POST /v1/job/"+strconv.Itoa(i), s.Label, "oldest first")
		require.Equal(t, "started", s.State)
		require.Regexp(t, `^app:\{[\w-]{22}\}$`, s.Name)
		require.Equal(t, "idemkey forget --redis redis://"+srv.Addr()+"/0 --prefix app: --name '"+s.Name+"'", s.Forget)
	}

	r = runBin(t, 60*time.Second, "doctor", "--redis", srv.Addr(), "--prefix", "app:")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "stuck records: 7 nobody holds")
	require.Regexp(t, `(?m)^  app:\{[\w-]{22}\}  started, attempt 1, label "POST /v1/job/0", first claimed \S+ ago$`, r.stdout)
	require.NotContains(t, r.stdout, "leave out the user and password")
	lines := regexp.MustCompile(`(?m)^    to forget it: (.*)$`).FindAllStringSubmatch(r.stdout, -1)
	require.Len(t, lines, 5, r.stdout)

	// Each printed line, run as a shell would split it, forgets its record
	// (--yes: stdin is no terminal here; --lease: the store's, so that the
	// young Redis's grace after a restart is the store's too).
	for i, m := range lines {
		args := shellSplit(t, m[1])
		require.Equal(t, "idemkey", args[0])
		require.Equal(t, rep.Stuck.Oldest[i].Forget, m[1], "the same line in text and JSON")
		name := rep.Stuck.Oldest[i].Name
		r := runBin(t, 30*time.Second, append(args[1:], "--yes", "--lease", "500ms")...)
		require.Equal(t, 0, r.code, "%s\nstdout:\n%s\nstderr:\n%s", m[1], r.stdout, r.stderr)
		require.Contains(t, r.stdout, "forgot the record of name "+name)
		require.Regexp(t, `level=INFO msg="idemkey forget: audit: record forgotten" name=`+regexp.QuoteMeta(name)+
			` prefix=app: forced=false by_name=true redis="`+regexp.QuoteMeta(srv.Addr())+` db 0" state=started attempt=1`, r.stderr)
		_, err := store.LookupName(ctx, name)
		require.ErrorIs(t, err, redisstore.ErrNotFound, "%s forgot its record", m[1])
		c, err := store.Claim(ctx, redisstore.Request{Scope: "s", Key: strconv.Itoa(i), Label: "POST /v1/job/" + strconv.Itoa(i)})
		require.NoError(t, err)
		require.Equal(t, redisstore.Claimed, c.Status, "the next request runs afresh")
		require.Equal(t, 1, c.Lease.Attempt)
		require.NoError(t, c.Lease.Complete(ctx, redisstore.Response{Code: 200}))
	}
	r = runBin(t, 60*time.Second, "doctor", "--json", "--redis", srv.Addr(), "--prefix", "app:")
	require.Equal(t, 0, r.code, r.stderr)
	rep = doctorReport{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.Equal(t, 2, rep.Stuck.Found, "the two the listing left out")
}

// shellSplit splits a command line as a POSIX shell does, for the quoting
// the commands print: words apart by spaces, single quotes, and
// backslashes outside them.
func shellSplit(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\'':
			quoted = false
		case quoted:
			w.WriteByte(c)
		case c == '\'':
			quoted, inWord = true, true
		case c == '\\' && i+1 < len(line):
			i++
			w.WriteByte(line[i])
			inWord = true
		case c == ' ':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			require.NotContains(t, "\"$`;&|<>()*?[#~", string(c), "an unquoted shell character in %q", line)
			w.WriteByte(c)
			inWord = true
		}
	}
	require.False(t, quoted, "an unterminated quote in %q", line)
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// doctor's forget lines name the server without the URL's credentials, and
// say so; a db, TLS and a Unix socket are kept.
func TestRedisArgumentLeavesOutCredentials(t *testing.T) {
	for _, tc := range []struct {
		url, want string
		creds     bool
	}{
		{"redis://127.0.0.1:6390/0", "redis://127.0.0.1:6390/0", false},
		{"redis://127.0.0.1:6390", "redis://127.0.0.1:6390/0", false},
		{"redis://app:s3cret@127.0.0.1:6390/3?dial_timeout=3s", "redis://127.0.0.1:6390/3", true},
		{"redis://:s3cret@[::1]:6390/1", "redis://[::1]:6390/1", true},
		{"rediss://tok3n@cache.internal:6380/0", "rediss://cache.internal:6380/0", true},
		{"unix://:s3cret@/run/redis.sock?db=2", "unix:///run/redis.sock?db=2", true},
		{"unix:///run/redis.sock", "unix:///run/redis.sock", false},
	} {
		got, creds := redisArgument(tc.url)
		require.Equal(t, tc.want, got, tc.url)
		require.Equal(t, tc.creds, creds, tc.url)
		require.NotContains(t, got, "s3cret")
		require.NotContains(t, got, "tok3n")
	}
	var w bytes.Buffer
	(&stuckReport{Found: 1, Oldest: []stuckRecord{{Name: "idem:{x}", Forget: "idemkey forget ..."}}, CredentialsLeftOut: true}).writeText(&w)
	require.Contains(t, w.String(), "The --redis URLs above leave out the user and password")
}
