package idemkeytest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/idemkeytest"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/internal/refserver"
	"github.com/idemkey/idemkey/redisstore"
)

// counter counts the records an endpoint created: its side effects.
type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *counter) add() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n
}

// shop is an API on httpmw: POST /v1/orders and /v1/refunds create a
// record each, once per (caller, key). A request with X-Crash dies after
// its record is created and checkpointed; the retry resumes from the
// checkpoint.
type shop struct {
	http.Handler
	orders, refunds *counter
}

func newApp(store *redisstore.Store) *shop {
	s := &shop{orders: &counter{}, refunds: &counter{}}
	idem := httpmw.New(store, httpmw.Options{}) // scoped by a hash of Authorization
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", idem(create(s.orders, "orders")))
	mux.Handle("POST /v1/refunds", idem(create(s.refunds, "refunds")))
	s.Handler = mux
	return s
}

func create(c *counter, kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var in map[string]any
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, "send a JSON object", http.StatusBadRequest)
			return
		}
		point, data := httpmw.RecoveryPoint(r.Context())
		id := string(data)
		if point != "created" {
			id = fmt.Sprintf("%s_%d", kind, c.add())
			if err := httpmw.Checkpoint(r.Context(), "created", []byte(id)); err != nil {
				http.Error(w, "try again", http.StatusServiceUnavailable)
				return
			}
		}
		if r.Header.Get("X-Crash") != "" {
			panic(http.ErrAbortHandler) // as if the process died here
		}
		w.Header().Set("Location", "/v1/"+kind+"/"+id)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q}`, id)
	}
}

// The table test of the package documentation, as it is there
// (TestDocShowsTheTableTest holds them together).
func TestIdempotency(t *testing.T) {
	store, rdb := idemkeytest.NewStore(t, redisstore.Options{})
	app := newApp(store)
	alice := http.Header{"Authorization": {"Bearer alice"}}
	bob := http.Header{"Authorization": {"Bearer bob"}}
	for _, tc := range []struct {
		path, body  string
		sideEffects func() int
	}{
		{"/v1/orders", `{"sku":"book","qty":1}`, app.orders.Count},
		{"/v1/refunds", `{"order":"ord_1","amount":500}`, app.refunds.Count},
	} {
		t.Run(tc.path, func(t *testing.T) {
			idemkeytest.Run(t, app, idemkeytest.Config{
				Path:        tc.path,
				Body:        []byte(tc.body),
				Header:      alice,
				OtherHeader: bob,
				SideEffects: tc.sideEffects,
				Redis:       rdb,
			})
		})
	}
}

func TestDocShowsTheTableTest(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)\n//\tfunc TestIdempotency\(.*?\n//\t}\n`).Find(doc)
	if m == nil {
		t.Fatal("doc.go shows no TestIdempotency")
	}
	shown := strings.ReplaceAll(string(m[1:]), "//\t", "")
	src, err := os.ReadFile("kit_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), shown) {
		t.Errorf("doc.go's table test is not TestIdempotency of kit_test.go:\n%s", shown)
	}
}

// backends runs f with a store on miniredis (NewStore) and on a private
// redis-server.
func backends(t *testing.T, f func(t *testing.T, store *redisstore.Store, rdb redis.UniversalClient)) {
	t.Run("miniredis", func(t *testing.T) {
		store, rdb := idemkeytest.NewStore(t, redisstore.Options{})
		f(t, store, rdb)
	})
	t.Run("redis-server", func(t *testing.T) {
		rdb := redistest.Start(t).Client(t)
		store, err := redisstore.New(rdb, redisstore.Options{Prefix: "test:idem:"})
		if err != nil {
			t.Fatal(err)
		}
		f(t, store, rdb)
	})
}

// Every check, the crash hook and the report, on httpmw.
func TestRunOnHTTPMW(t *testing.T) {
	backends(t, func(t *testing.T, store *redisstore.Store, rdb redis.UniversalClient) {
		app := newApp(store)
		var report bytes.Buffer
		idemkeytest.Run(t, app, idemkeytest.Config{
			Path:        "/v1/orders",
			Body:        []byte(`{"sku":"book","qty":1}`),
			Header:      http.Header{"Authorization": {"Bearer alice"}},
			OtherHeader: http.Header{"Authorization": {"Bearer bob"}},
			SideEffects: app.orders.Count,
			Crash:       func(r *http.Request) { r.Header.Set("X-Crash", "1") },
			Redis:       rdb,
			Prefix:      store.Options().Prefix,
			Report:      &report,
		})
		// concurrency, the fingerprint probes' own key, lost-response,
		// scope (bob's), crash-resume.
		if n := app.orders.Count(); n != 5 {
			t.Errorf("%d orders, want 5", n)
		}
		md := report.String()
		for _, want := range []string{
			"## Idempotency for `POST /v1/orders`\n",
			"- Mechanism: Idempotency-Key with stored responses",
			"- Key scope and retention: scope: per caller, as observed: another caller's request with the same key ran for that caller (201 Created",
			"Retention: every record has a TTL (",
			"- Fingerprint: body and query, as far as the checks showed; JSON bodies compared canonically",
			"- Tests: concurrency ok, replay ok, mismatch ok, crash-resume ok. Every check of `idemkeytest`:\n",
			"  - ok ttl: ",
			"- Verdict: **pass** (10 ok, 1 skipped): `idemkeytest`, ",
		} {
			if !strings.Contains(md, want) {
				t.Errorf("the report lacks %q:\n%s", want, md)
			}
		}
	})
}

// The kit run by a real *testing.T, in a child process: the checks are its
// subtests, a broken handler fails the one named for its defect, and -run
// can pick one check (the ones before it still run, unreported).
func TestRunFailsTheTest(t *testing.T) {
	if os.Getenv("IDEMKEYTEST_CHILD") != "" {
		t.Skip("in the child")
	}
	for _, tc := range []struct {
		name, run string
		want      []string
		not       []string
	}{
		{
			name: "unmarked", run: "TestChild",
			want: []string{"--- FAIL: TestChild/replay", "idemkeytest: check replay failed for POST /pay",
				"not so: marked Idempotent-Replayed: true: 201", "--- PASS: TestChild/side-effects", "--- SKIP: TestChild/ttl"},
		},
		{
			name: "unmarked", run: "TestChild/replay",
			want: []string{"--- FAIL: TestChild/replay"},
			not:  []string{"TestChild/concurrency", "TestChild/side-effects"},
		},
	} {
		t.Run(tc.run, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", "^"+strings.ReplaceAll(tc.run, "/", "$/^")+"$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "IDEMKEYTEST_CHILD="+tc.name)
			out, err := cmd.CombinedOutput()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Fatalf("want exit status 1, got %v:\n%s", err, out)
			}
			for _, want := range tc.want {
				if !strings.Contains(string(out), want) {
					t.Errorf("the output lacks %q:\n%s", want, out)
				}
			}
			for _, not := range tc.not {
				if strings.Contains(string(out), not) {
					t.Errorf("the output has %q:\n%s", not, out)
				}
			}
		})
	}
}

// TestChild is the child of TestRunFailsTheTest.
func TestChild(t *testing.T) {
	if os.Getenv("IDEMKEYTEST_CHILD") != "unmarked" {
		t.Skip("run by TestRunFailsTheTest")
	}
	s := &refserver.Server{NoReplayHeader: true}
	idemkeytest.Run(t, s, idemkeytest.Config{Path: "/pay", Body: []byte(`{"amount":1}`),
		SideEffects: func() int { return int(s.Runs()) }})
}

// The kit adds no test framework to its users' dependencies.
func TestNoTestify(t *testing.T) {
	gobin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			t.Skip("no go command")
		}
	}
	out, err := exec.CommandContext(t.Context(), gobin, "list", "-deps", ".", "../internal/verify").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "testify") || strings.Contains(dep, "gin-gonic") {
			t.Errorf("idemkeytest depends on %s", dep)
		}
	}
	if !strings.Contains(string(out), "github.com/idemkey/idemkey/internal/verify\n") {
		t.Errorf("go list -deps lists no internal/verify:\n%s", out)
	}
}
