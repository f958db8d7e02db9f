package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
)

// serveOnce serves one payment request with key through h in process
// (httptest, no network) and checks the status.
func serveOnce(h http.Handler, key string, want int) error {
	req := httptest.NewRequest(http.MethodPost, paymentPath, bytes.NewReader(firstBody))
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header[keyHeader] = []string{key}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != want {
		return fmt.Errorf("%w: status %d, want %d: %.100s", errStatus, w.Code, want, w.Body)
	}
	return nil
}

// countAllocs runs op once to warm up, then runs times, and returns the
// heap allocations and bytes per run, counted by the runtime over the whole
// process as testing.B does with -benchmem: what op starts on other
// goroutines counts too.
func countAllocs(runs int, op func(i int) error) (allocs, bytes float64, err error) {
	if err := op(-1); err != nil {
		return 0, 0, err
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range runs {
		if err := op(i); err != nil {
			return 0, 0, err
		}
	}
	runtime.ReadMemStats(&after)
	n := float64(runs)
	return float64(after.Mallocs-before.Mallocs) / n, float64(after.TotalAlloc-before.TotalAlloc) / n, nil
}

// allocs counts Go allocations per first execution (a fresh key each time)
// and per replay (one stored key) of every contender, served in process
// through the contender's own handler and Redis client, one at a time.
func (r *runner) allocs(ctx context.Context) error {
	for _, name := range r.names {
		c := r.cs[name]
		h := c.srv.srv.Handler
		cases := []string{CaseFirst, CaseReplay}
		if name == Bare {
			cases = cases[:1]
		}
		for _, cs := range cases {
			if err := ctx.Err(); err != nil {
				return err
			}
			var op func(i int) error
			switch cs {
			case CaseFirst:
				prefix := r.key(name+".allocs", 0, 0) + "-"
				op = func(i int) error { return serveOnce(h, prefix+strconv.Itoa(i), http.StatusCreated) }
			case CaseReplay:
				key := r.key(name+".allocs-replay", 0, 0)
				op = func(int) error { return serveOnce(h, key, http.StatusCreated) }
			}
			perOp, bytesOp, err := countAllocs(r.cfg.AllocRuns, op)
			if err != nil {
				return fmt.Errorf("%s, %s: %w", name, cs, err)
			}
			a := Allocs{Contender: name, Case: cs, Runs: r.cfg.AllocRuns, PerOp: round1(perOp), BytesOp: round1(bytesOp)}
			r.res.Allocs = append(r.res.Allocs, a)
			r.log("allocs: %s, %s: %.1f allocs, %.0f B per request", name, cs, a.PerOp, a.BytesOp)
		}
	}
	return nil
}
