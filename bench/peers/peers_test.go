package peers

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkey/idemkey/internal/redistest"
)

// TestBenchTiny runs a tiny configuration end to end and checks the JSON
// figures the main benchmark runner embeds.
func TestBenchTiny(t *testing.T) {
	srv := redistest.Start(t)
	o := Options{
		Rounds:           2,
		Duration:         150 * time.Millisecond,
		Concurrency:      4,
		ReplayKeys:       20,
		Keys:             30,
		Dups:             4,
		StormConcurrency: 16,
		TwoInstances:     true,
	}
	res, err := Run(t.Context(), o, "127.0.0.1", srv.Port())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{
		"library", "fiber_version", "storage_module", "storage_version", "go_version", "redis_version",
		"rounds", "first_overhead_ratio_median", "replay_rps", "storm", "storm_two_instances", "notes",
	} {
		if _, ok := got[f]; !ok {
			t.Errorf("JSON lacks %q", f)
		}
	}
	rounds, _ := got["rounds"].([]any)
	if len(rounds) != o.Rounds {
		t.Fatalf("rounds = %v", got["rounds"])
	}
	for _, r := range rounds {
		m, _ := r.(map[string]any)
		for _, f := range []string{"first_rps_bare", "first_rps_idem", "ratio"} {
			if v, _ := m[f].(float64); v <= 0 {
				t.Errorf("round %s = %v, want > 0", f, m[f])
			}
		}
	}
	for _, name := range []string{"storm", "storm_two_instances"} {
		m, _ := got[name].(map[string]any)
		for _, f := range []string{
			"keys", "dups", "concurrency", "executions_max", "keys_executed_more_than_once",
			"divergent_keys", "status_counts", "rps", "p50_ms", "p99_ms",
		} {
			if _, ok := m[f]; !ok {
				t.Errorf("%s lacks %q", name, f)
			}
		}
	}
	if res.RedisVersion == "unknown" || res.FiberVersion == "" {
		t.Errorf("versions: redis %q fiber %q", res.RedisVersion, res.FiberVersion)
	}
	if res.LoadErrors != 0 || res.ReplayExecutions != 0 {
		t.Errorf("load errors %d, replay executions %d; want 0", res.LoadErrors, res.ReplayExecutions)
	}

	// Within one process fiber's in-memory lock serialises duplicates, so
	// the single-instance storm must execute every key exactly once.
	s := res.Storm
	if s.KeysExecuted != o.Keys || s.ExecutionsMax != 1 || s.KeysExecutedMoreThanOnce != 0 || s.DivergentKeys != 0 {
		t.Errorf("single-instance storm: %+v", s)
	}
	if s.Replays != o.Keys*(o.Dups-1) || s.Verdict != "pass" {
		t.Errorf("single-instance storm: replays %d verdict %s", s.Replays, s.Verdict)
	}
	if s2 := res.StormTwoInstances; s2.Instances != 2 || s2.KeysExecuted != o.Keys || s2.Requests != o.Keys*o.Dups {
		t.Errorf("two-instance storm: %+v", s2)
	}

	var text bytes.Buffer
	if err := res.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "storm, 2 instance(s)") {
		t.Errorf("text summary:\n%s", text.String())
	}
}

func TestRoundRobin(t *testing.T) {
	var hits [2]atomic.Int64
	newSrv := func(i int) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits[i].Add(1) }))
		t.Cleanup(s.Close)
		return s
	}
	a, b := newSrv(0), newSrv(1)
	rr, err := newRoundRobin(http.DefaultTransport, hostOf(a.URL), hostOf(b.URL))
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: rr}
	for range 6 {
		req, _ := http.NewRequest(http.MethodGet, a.URL+"/x", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if req.URL.Host != hostOf(a.URL) {
			t.Fatal("round robin modified the caller's request")
		}
	}
	if a, b := hits[0].Load(), hits[1].Load(); a != 3 || b != 3 {
		t.Fatalf("hits = %d, %d; want 3 each", a, b)
	}
}

func TestKeyMaker(t *testing.T) {
	k := &keyMaker{nonce: 0xdeadbeef}
	seen := map[string]bool{}
	for w := range 3 {
		for s := range 3 {
			key := k.key(5, w, s)
			if len(key) != 36 || seen[key] {
				t.Fatalf("key %q: length %d, duplicate %v", key, len(key), seen[key])
			}
			seen[key] = true
		}
	}
}
