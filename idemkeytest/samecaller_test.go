package idemkeytest

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemkey/idemkey/ginmw"
	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/redisstore"
)

// callers maps a bearer token to its caller: alice's token before and after
// a refresh, and bob's.
var callers = map[string]string{"Bearer alice": "alice", "Bearer alice-refreshed": "alice", "Bearer bob": "bob"}

var aliceRefreshed = http.Header{"Authorization": {"Bearer alice-refreshed"}}

// callerOf is the app's authentication: the caller a token belongs to.
func callerOf(r *http.Request) (string, error) {
	if c, ok := callers[r.Header.Get("Authorization")]; ok {
		return c, nil
	}
	return "", errors.New("unknown token")
}

// ordersOn returns an app that creates an order per run, with the
// middleware's scope: the caller (withScope), or the default (a hash of the
// credential).
func ordersOn(store *redisstore.Store, gin_, withScope bool, runs *atomic.Int64) http.Handler {
	create := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, runs.Add(1))
	}
	if gin_ {
		opts := ginmw.Options{}
		if withScope {
			opts.Scope = func(c *gin.Context) (string, error) { return callerOf(c.Request) }
		}
		r := gin.New()
		r.POST("/orders", ginmw.New(store, opts), func(c *gin.Context) { create(c.Writer) })
		return r
	}
	opts := httpmw.Options{}
	if withScope {
		opts.Scope = callerOf
	}
	return httpmw.New(store, opts)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { create(w) }))
}

// The same caller presenting a refreshed token must get the replay: an app
// whose scope is the caller passes the same-caller check; one on the
// default scope, which hashes the credential, runs the order again and
// fails it, told to set Scope.
func TestRunSameCallerWantsTheScopeToBeTheCaller(t *testing.T) {
	gin.SetMode(gin.TestMode)
	for _, tc := range []struct {
		name           string
		gin, withScope bool
		result         string
		says           []string
		runs           int64 // the handler's runs over the whole kit
	}{
		{name: "httpmw with a Scope of its own", withScope: true, result: "ok", runs: 4},
		{name: "ginmw with a Scope of its own", gin: true, withScope: true, result: "ok", runs: 4},
		{name: "httpmw on the default scope", result: "fail", runs: 5, says: []string{
			"idemkeytest: check same-caller failed for POST /orders (key ",
			"not so: the same caller with another credential gets the first answer replayed: marked Idempotent-Replayed: true: 201 (application/json, 11 bytes)",
			"not so: nothing ran again: SideEffects +1",
			"set Options.Scope to the authenticated caller"}},
		{name: "ginmw on the default scope", gin: true, result: "fail", runs: 5, says: []string{
			"not so: nothing ran again: SideEffects +1", "set Options.Scope to the authenticated caller"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, _ := NewStore(t, redisstore.Options{})
			var runs atomic.Int64
			r := record(t, ordersOn(store, tc.gin, tc.withScope, &runs), Config{
				Path: "/orders", Body: []byte(order), Header: alice, OtherHeader: bob, SameCallerHeader: aliceRefreshed,
				SideEffects: func() int { return int(runs.Load()) },
			})
			res := r.results()
			if res["same-caller"] != tc.result {
				t.Fatalf("want same-caller %s:\n%s", tc.result, r)
			}
			for name, got := range res {
				if name != "same-caller" && got == "fail" {
					t.Errorf("check %s failed too:\n%s", name, r)
				}
			}
			msg := r.message("same-caller")
			for _, want := range tc.says {
				if !strings.Contains(msg, want) {
					t.Errorf("want %q in:\n%s", want, msg)
				}
			}
			// concurrency, the probes, lost-response and bob's own run;
			// alice's refreshed token one more on the default scope.
			if got := runs.Load(); got != tc.runs {
				t.Errorf("the handler ran %d times, want %d", got, tc.runs)
			}
		})
	}
}

// SameCallerHeader must differ from Header.
func TestRunRefusesASameCallerHeaderThatChangesNothing(t *testing.T) {
	r := record(t, http.NotFoundHandler(), Config{Path: "/orders", Body: []byte(order), Header: alice,
		SameCallerHeader: alice.Clone(), SideEffects: func() int { return 0 }})
	if !r.fatal || !strings.Contains(strings.Join(r.logs, "\n"), "Config.SameCallerHeader is Config.Header") {
		t.Fatalf("want a fatal error naming SameCallerHeader:\n%s", r)
	}
}
