package idemkeytest

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/redisstore"
)

// crashy is an httpmw handler that creates a record per run; with X-Crash
// it dies after creating it. With checkpoint it records that in a
// checkpoint first and resumes from it; with ignoreCrash it never dies.
func crashy(store *redisstore.Store, runs *atomic.Int64, checkpoint, ignoreCrash bool) http.Handler {
	return httpmw.New(store, httpmw.Options{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		point, data := httpmw.RecoveryPoint(r.Context())
		id := string(data)
		if point != "made" {
			id = fmt.Sprint(runs.Add(1))
			if checkpoint {
				if err := httpmw.Checkpoint(r.Context(), "made", []byte(id)); err != nil {
					http.Error(w, "try again", http.StatusServiceUnavailable)
					return
				}
			}
		}
		if r.Header.Get("X-Crash") != "" && !ignoreCrash {
			panic(http.ErrAbortHandler)
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%s}`, id)
	}))
}

func TestRunCrashResume(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		checkpoint, ignoreCrash bool
		says                    string // "" for a pass
	}{
		{"resumes from its checkpoint", true, false, ""},
		{"runs again", false, false, "not so: exactly one side effect for the key, the crashed attempt's included: SideEffects +2"},
		{"never crashes", true, true, "not so: the first attempt, crashed by Config.Crash, gets no answer: it was answered: 201 (8 bytes); does Config.Crash make the handler crash?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, rdb := NewStore(t, redisstore.Options{})
			var runs atomic.Int64
			r := record(t, crashy(store, &runs, tc.checkpoint, tc.ignoreCrash), Config{
				Path: "/orders", Body: []byte(`{"n":1}`), Header: alice,
				SideEffects: func() int { return int(runs.Load()) },
				Crash:       func(r *http.Request) { r.Header.Set("X-Crash", "1") },
				Redis:       rdb,
			})
			res := r.results()
			if tc.says == "" {
				if res["crash-resume"] != "ok" || res["ttl"] != "ok" {
					t.Fatalf("want crash-resume and ttl to pass:\n%s", r)
				}
				return
			}
			if res["crash-resume"] != "fail" || !strings.Contains(r.message("crash-resume"), tc.says) {
				t.Fatalf("want crash-resume to fail with %q:\n%s", tc.says, r)
			}
		})
	}
}

// A key without a TTL under the store's prefix fails the ttl check, named;
// a wrong Prefix finds no key.
func TestRunTTL(t *testing.T) {
	store, rdb := NewStore(t, redisstore.Options{})
	if err := rdb.Set(t.Context(), "idem:forever", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	cfg := Config{Path: "/orders", Body: []byte(`{"n":1}`), Header: alice,
		SideEffects: func() int { return int(runs.Load()) }, Redis: rdb}
	r := record(t, crashy(store, &runs, true, false), cfg)
	if msg := r.message("ttl"); r.results()["ttl"] != "fail" || !strings.Contains(msg, `not so: every record has a TTL: 4 keys under "idem:", 1 without a TTL: "idem:forever"`) {
		t.Fatalf("want ttl to fail naming the key:\n%s", r)
	}
	cfg.Prefix = "other:"
	r = record(t, crashy(store, &runs, true, false), cfg)
	if msg := r.message("ttl"); r.results()["ttl"] != "fail" || !strings.Contains(msg, `not so: the run's records are found: no key under "other:"; is that where the store writes?`) {
		t.Fatalf("want ttl to find no key:\n%s", r)
	}
}
