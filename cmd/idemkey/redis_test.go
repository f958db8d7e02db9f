package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/redisstore"
)

// secret is the password of the URLs below; no output may show it, raw or
// escaped.
const secret = "s3cr3t-pw"

func requireNoSecret(t *testing.T, what, out string) {
	t.Helper()
	for _, s := range []string{secret, url.QueryEscape(secret), "s3cr3t"} {
		require.NotContains(t, out, s, "%s shows the password:\n%s", what, out)
	}
}

// Regression: a --redis URL that did not parse was echoed
// with its password by inspect, doctor (text and --json) and serve: url.Parse
// quotes the whole URL, go-redis's ParseURL quotes the path, and doctor's
// JSON named the server by the raw URL. Now no output of any command shows
// a password, whatever the URL and however it fails.
func TestRedisURLsNeverShowTheirPassword(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.RequireAuth("the-right-one")
	for _, tc := range []struct {
		name, url string
		code      int    // of inspect and doctor; serve's usage errors are 2, its connection errors 1
		hint      string // what the error must still say
	}{
		{"bad port", "redis://app:" + secret + "@127.0.0.1:port/0", 2, "invalid port"},
		{"slash in the password", "redis://app:s3cr3t/-pw@127.0.0.1:1/0", 2, "user or password"},
		{"at in the password", "redis://app:s3cr3t@-pw@127.0.0.1:1/0", 2, "127.0.0.1:1"}, // parses: refused
		{"bad escape in the password", "redis://app:s3cr3t%zz-pw@127.0.0.1:1/0", 2, "user or password"},
		{"no scheme, bad database", "app:" + secret + "@127.0.0.1:1/x", 2, "invalid database number"},
		{"one slash", "redis:/app:" + secret + "@127.0.0.1:1/0", 2, "user or password"},
		{"password without a host", "redis://:" + secret, 2, "invalid port"},
		{"bad scheme", "http://app:" + secret + "@127.0.0.1:1/0", 2, "scheme"},
		{"unix", "unix://app:" + secret + "@/no/such.sock?bogus=1", 2, "unexpected option"},
		{"refused", "redis://app:" + secret + "@127.0.0.1:1/0", 2, "127.0.0.1:1"},
		{"wrong password", "redis://app:" + secret + "@" + mr.Addr() + "/0", 2, mr.Addr()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // the refused connections wait on the client's dial retries
			for _, args := range [][]string{
				{"inspect", "--scope", "s", "--redis", tc.url, "k1"},
				{"doctor", "--redis", tc.url},
				{"doctor", "--json", "--redis", tc.url},
				{"ls", "--redis", tc.url},
				{"ls", "--json", "--redis", tc.url},
				{"forget", "--yes", "--scope", "s", "--redis", tc.url, "k1"},
				{"forget", "--yes", "--redis", tc.url, "--name", "idem:{AAAAAAAAAAAAAAAAAAAAAA}"},
			} {
				r := runBin(t, 60*time.Second, args...)
				what := strings.Join(args[:len(args)-1], " ")
				requireNoSecret(t, what, r.stdout+r.stderr)
				require.Equal(t, tc.code, r.code, "%s\nstdout:\n%s\nstderr:\n%s", what, r.stdout, r.stderr)
				require.Contains(t, r.stderr, tc.hint, what)
				if args[0] == "doctor" && args[1] == "--json" {
					var rep doctorReport
					require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
					require.NotEmpty(t, rep.Redis)
					require.Contains(t, rep.Error, tc.hint)
				}
			}
			r := runBin(t, 60*time.Second, "serve", "--addr", "127.0.0.1:0", "--redis", tc.url)
			requireNoSecret(t, "serve", r.stdout+r.stderr)
			require.NotZero(t, r.code, r.stderr)
			require.Contains(t, r.stderr, tc.hint, "serve")
		})
	}
}

// $REDIS_URL, the default of --redis, was printed (password included) in
// the flag defaults of every usage message: -h, and any bad flag.
func TestRedisURLFromTheEnvironmentIsNotShown(t *testing.T) {
	env := []string{"REDIS_URL=redis://app:" + secret + "@127.0.0.1:1/0"}
	for _, args := range [][]string{
		{"inspect", "-h"}, {"inspect", "--bogus"}, {"doctor", "-h"}, {"doctor", "--bogus"},
		{"serve", "-h"}, {"serve", "--bogus"}, {"doctor", "--json"}, {"inspect", "--scope", "s", "k1"},
		{"ls"}, {"ls", "--json"}, {"ls", "-h"}, {"ls", "--bogus"},
		{"forget", "--yes", "--scope", "s", "k1"}, {"forget", "--yes", "--name", "idem:{AAAAAAAAAAAAAAAAAAAAAA}"},
		{"forget", "-h"}, {"forget", "--bogus"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel() // each waits on a Redis that is not there
			r := runBinEnv(t, 30*time.Second, env, args...)
			requireNoSecret(t, strings.Join(args, " "), r.stdout+r.stderr)
			require.NotZero(t, r.stdout+r.stderr, strings.Join(args, " "))
		})
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://127.0.0.1:1/0":                     "redis://127.0.0.1:1/0",
		"redis://app:" + secret + "@h:6379/0":       "redis://xxxxx@h:6379/0",
		"redis://:" + secret + "@h:6379/0":          "redis://xxxxx@h:6379/0",
		"redis://app:s3cr3t/-pw@h:6379/0":           "redis://xxxxx@h:6379/0",
		"redis://a:b@c@h":                           "redis://xxxxx@h",
		"rediss://app:" + secret + "@h:port":        "rediss://xxxxx@h:xxxxx",
		"redis://:" + secret:                        "redis://:xxxxx",
		"redis://h:6379?client_name=a@b":            "redis://xxxxx@b", // over-redacted, never under
		"unix://app:" + secret + "@/run/redis.sock": "unix://xxxxx@/run/redis.sock",
		"h:6379":                    "h:6379",
		"app:" + secret + "@h:6379": "xxxxx@h:6379",
	} {
		require.Equal(t, want, redactURL(in), in)
	}
	o, err := redisOptions("redis://app:" + secret + "@127.0.0.1:1/2")
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:1 db 2", optionsName(o))
	o.Addr = "app:" + secret + "@127.0.0.1:1"
	require.Equal(t, "xxxxx@127.0.0.1:1 db 2", optionsName(o))
	require.Equal(t, "redis://h:1/0?client_name=xxxxx&pool_fifo=xxxxx&x#xxxxx", redactURL("redis://h:1/0?client_name="+secret+"&pool_fifo=1&x#"+secret))
}

// Errors of the connection quote neither the password nor, when there is
// no password, the one-part user-info that go-redis takes for a user name.
func TestScrubbed(t *testing.T) {
	err := scrubbed(fmt.Errorf("dial %s: %w", secret, context.Canceled), &redis.Options{Username: "app", Password: secret})
	require.Equal(t, "dial xxxxx: context canceled", err.Error())
	require.ErrorIs(t, err, context.Canceled)
	err = scrubbed(errors.New("auth "+secret+" for app"), &redis.Options{Username: secret})
	require.Equal(t, "auth xxxxx for app", err.Error())
}

// With the right password, doctor's forget lines name the server without
// it, and say so; ls, and forget of the line's record, show it nowhere.
func TestDoctorForgetLinesLeaveOutThePassword(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.RequireUserAuth("app", secret)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), Username: "app", Password: secret})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, redisstore.Options{Lease: 500 * time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	c, err := store.Claim(ctx, redisstore.Request{Scope: "s", Key: "k1", Label: "POST /v1/x"})
	require.NoError(t, err)
	require.NoError(t, c.Lease.Interrupt(ctx)) // released: nobody holds it
	url := "redis://app:" + secret + "@" + mr.Addr() + "/0"

	r := runBin(t, 60*time.Second, "doctor", "--redis", url)
	requireNoSecret(t, "doctor", r.stdout+r.stderr)
	require.Contains(t, r.stdout, "    to forget it: idemkey forget --redis redis://"+mr.Addr()+"/0 --prefix idem: --name '"+store.RecordName("s", "k1")+"'\n")
	require.Contains(t, r.stdout, "The --redis URLs above leave out the user and password")
	r = runBin(t, 60*time.Second, "doctor", "--json", "--redis", url)
	requireNoSecret(t, "doctor --json", r.stdout+r.stderr)
	var rep doctorReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.True(t, rep.Stuck.CredentialsLeftOut)

	for _, args := range [][]string{{"ls", "--redis", url}, {"ls", "--json", "--redis", url}} {
		r := runBin(t, 60*time.Second, args...)
		requireNoSecret(t, args[0], r.stdout+r.stderr)
		require.Equal(t, 0, r.code, r.stderr)
	}
	r = runBinEnv(t, 60*time.Second, []string{"REDIS_URL=" + url}, "forget", "--yes", "--prefix", "idem:", "--name", store.RecordName("s", "k1"))
	requireNoSecret(t, "forget", r.stdout+r.stderr)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, "audit: record forgotten")
	_, err = store.LookupName(ctx, store.RecordName("s", "k1"))
	require.ErrorIs(t, err, redisstore.ErrNotFound)
}
