// Command stormhistory measures what storm's history costs and how fast
// it is judged:
//
//   - memory: a load run of -ops operations at -rate against an
//     idempotent in-memory handler, in a process of its own, with and
//     without --history (streamed to a file), alternating which goes
//     first, -rounds rounds; it prints each run's peak RSS (the child's
//     Maxrss), its elapsed time and the history's size, and the medians;
//
//   - check: a history of -check-ops operations x -check-dups copies
//     (one attempt each, and the late probe's), written once by a storm,
//     then judged by 'idemkey check' as storm.CheckCommand runs it, in a
//     process of its own, -rounds times; it prints each wall time and the
//     median.
//
//     go -C bench run ./cmd/stormhistory -ops 10000 -rate 1000 -rounds 3
//     go -C bench run ./cmd/stormhistory -skip-memory -check-ops 10000 -check-dups 10 -rounds 5
//
// The figures go to bench/RESULTS.md by hand, under "Storm history".
package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemkey/idemkey/idemclient"
	"github.com/idemkey/idemkey/storm"
)

func main() {
	var (
		child     = flag.Bool("child", false, "child: run one storm against -url and print its figures as JSON")
		checkFile = flag.String("check", "", "child: judge this history as 'idemkey check' does")
		url       = flag.String("url", "", "child: the target URL")
		history   = flag.String("history", "", "child: write the history to `file`")
		ops       = flag.Int("ops", 10000, "operations of the memory runs")
		rate      = flag.Float64("rate", 1000, "operations per second")
		dups      = flag.Int("dups", 1, "child: copies of each operation")
		rounds    = flag.Int("rounds", 3, "parent: rounds")
		checkN    = flag.Int("check-attempts", 100000, "parent: storm attempts of the history judged by 'idemkey check'")
		skipMem   = flag.Bool("skip-memory", false, "parent: only the check timing")
	)
	flag.Parse()
	var err error
	switch {
	case *checkFile != "":
		os.Exit(storm.CheckCommand([]string{*checkFile}, io.Discard, os.Stderr))
	case *child:
		err = runChild(*url, *rate, *ops, *dups, *history)
	default:
		err = parent(*ops, *rate, *rounds, *checkN, *skipMem)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "stormhistory:", err)
		os.Exit(1)
	}
}

// figures is what a child reports.
type figures struct {
	Verdict  string        `json:"verdict"`
	Attempts int           `json:"attempts"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	// PeakHeap is the highest HeapInuse seen, sampled every 50ms, and
	// Allocated the bytes allocated over the run: the Go heap's share of
	// the peak RSS, steadier than it.
	PeakHeap  uint64 `json:"peak_heap"`
	Allocated uint64 `json:"allocated"`
	// Live is the heap after the run and a collection, the report still
	// held: what the storm keeps.
	Live uint64 `json:"live"`
}

func runChild(url string, rate float64, ops, dups int, history string) error {
	cfg := storm.Config{URL: url, Body: []byte(`{"amount":1250,"currency":"eur"}`), Rate: rate,
		Duration: time.Duration(float64(ops) / rate * float64(time.Second)), Dups: dups, MaxInFlight: 512, Timeout: 30 * time.Second}
	if history != "" {
		f, err := os.Create(history)
		if err != nil {
			return err
		}
		defer f.Close()
		cfg.History = f
	}
	var peak atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	rep, err := storm.Run(context.Background(), cfg)
	close(done)
	<-sampled
	if err != nil {
		return err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fig := figures{Verdict: rep.Verdict(), Attempts: rep.Requests, Elapsed: rep.Elapsed,
		PeakHeap: max(peak.Load(), ms.HeapInuse), Allocated: ms.TotalAlloc}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	fig.Live = ms.HeapAlloc
	runtime.KeepAlive(rep)
	return json.NewEncoder(os.Stdout).Encode(fig)
}

// idempotent is an in-memory idempotent handler: the first request of a
// key is stored, the others replayed.
func idempotent() http.Handler {
	var mu sync.Mutex
	stored := map[string]bool{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		seen := stored[key]
		stored[key] = true
		mu.Unlock()
		if seen {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"pay_1","status":"captured","amount":1250,"currency":"eur"}`)
	})
}

type run struct {
	figures
	rss     int64 // KiB
	cpu     time.Duration
	wall    time.Duration
	histLen int64
}

func parent(ops int, rate float64, rounds, checkN int, skipMem bool) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: idempotent(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	url := "http://" + l.Addr().String() + "/pay"
	dir, err := os.MkdirTemp("", "stormhistory-")
	if err != nil {
		return err
	}
	if keep := os.Getenv("STORMHISTORY_KEEP"); keep != "" {
		dir = keep
	} else {
		defer os.RemoveAll(dir)
	}

	child := func(args ...string) (run, error) {
		var r run
		cmd := exec.Command(self, args...)
		cmd.Stderr = os.Stderr
		start := time.Now()
		out, err := cmd.Output()
		r.wall = time.Since(start)
		if cmd.ProcessState != nil {
			if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
				r.rss = ru.Maxrss
				r.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			}
		}
		if err != nil {
			return r, fmt.Errorf("%v: %w", args, err)
		}
		if len(out) > 0 {
			if err := json.Unmarshal(out, &r.figures); err != nil {
				return r, err
			}
		}
		return r, nil
	}
	if !skipMem {
		fmt.Printf("memory: %d operations at %.0f/s against an idempotent handler, peak RSS of the storm's process\n", ops, rate)
		var without, with []run
		for i := range rounds {
			for j := range 2 {
				withHistory := (i+j)%2 == 1
				args := []string{"-child", "-url", url, "-rate", fmt.Sprint(rate), "-ops", fmt.Sprint(ops)}
				path := filepath.Join(dir, "mem.jsonl")
				if withHistory {
					args = append(args, "-history", path)
				}
				r, err := child(args...)
				if err != nil {
					return err
				}
				label := "without"
				if withHistory {
					st, err := os.Stat(path)
					if err != nil {
						return err
					}
					r.histLen, label = st.Size(), "with"
					with = append(with, r)
				} else {
					without = append(without, r)
				}
				fmt.Printf("  round %d %-7s --history: peak RSS %5.1f MiB, peak heap %5.1f MiB, live heap after %5.1f MiB, allocated %6.1f MiB, %d attempts, storm %s, verdict %s, history %.1f MiB\n",
					i+1, label, float64(r.rss)/1024, float64(r.PeakHeap)/(1<<20), float64(r.Live)/(1<<20), float64(r.Allocated)/(1<<20), r.Attempts,
					r.Elapsed.Round(time.Millisecond), r.Verdict, float64(r.histLen)/(1<<20))
			}
		}
		mw, mo := median(with, func(r run) float64 { return float64(r.rss) }), median(without, func(r run) float64 { return float64(r.rss) })
		fmt.Printf("  median peak RSS: %.1f MiB with --history, %.1f MiB without: %+.1f MiB (%.3fx)\n", mw/1024, mo/1024, (mw-mo)/1024, mw/mo)
		hw, ho := median(with, func(r run) float64 { return float64(r.PeakHeap) }), median(without, func(r run) float64 { return float64(r.PeakHeap) })
		fmt.Printf("  median peak heap: %.1f MiB with --history, %.1f MiB without: %+.1f MiB (%.3fx)\n", hw/(1<<20), ho/(1<<20), (hw-ho)/(1<<20), hw/ho)
		lw, lo := median(with, func(r run) float64 { return float64(r.Live) }), median(without, func(r run) float64 { return float64(r.Live) })
		fmt.Printf("  median live heap after the run: %.2f MiB with --history, %.2f MiB without: %+.2f MiB\n", lw/(1<<20), lo/(1<<20), (lw-lo)/(1<<20))
		aw, ao := median(with, func(r run) float64 { return float64(r.Allocated) }), median(without, func(r run) float64 { return float64(r.Allocated) })
		fmt.Printf("  median allocated: %.1f MiB with --history, %.1f MiB without: %+.1f MiB\n", aw/(1<<20), ao/(1<<20), (aw-ao)/(1<<20))
	}

	path := filepath.Join(dir, "check.jsonl")
	h := synthetic(checkN)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	size, err := h.WriteTo(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Printf("check: a synthetic history of %d storm attempts (%d operations, and the probe's attempts), %.1f MiB\n",
		checkN, len(h.Operations), float64(size)/(1<<20))
	var checks []run
	for i := range rounds {
		c, err := child("-check", path)
		var exit *exec.ExitError
		if err != nil && (!errors.As(err, &exit) || exit.ExitCode() == 2) {
			return err
		}
		checks = append(checks, c)
		fmt.Printf("  round %d: %s wall, %s CPU, peak RSS %.1f MiB\n", i+1, c.wall.Round(time.Millisecond), c.cpu.Round(time.Millisecond),
			float64(c.rss)/1024)
	}
	fmt.Printf("  median: %s wall, %s CPU\n", time.Duration(median(checks, func(r run) float64 { return float64(r.wall) })).Round(time.Millisecond),
		time.Duration(median(checks, func(r run) float64 { return float64(r.cpu) })).Round(time.Millisecond))
	return nil
}

func median(rs []run, f func(run) float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	slices.Sort(vs)
	return vs[len(vs)/2]
}

// synthetic returns a finished load-mode history with n storm attempts, a
// mix of what a storm through a slow window records, one operation every
// millisecond: most operations one original; one in four a timeout, a 409
// and a replay; one in ten a 500 that storm retried and an original; one in
// twenty four timeouts and no answer; and a probe's replay for each
// operation with a final answer.
func synthetic(n int) *storm.History {
	h := &storm.History{Header: storm.Header{Version: storm.HistoryVersion, URL: "http://127.0.0.1:8080/v1/payments", Method: "POST",
		Started: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)}}
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	attempts := 0
	for i := 0; attempts < n; i++ {
		key := idemclient.NewKey()
		body := fmt.Appendf(nil, `{"id":"pay_%d","status":"captured"}`, i)
		sum := sha256.Sum256(body)
		due := ms(float64(i))
		op := storm.Operation{Op: i, Key: key, Scheduled: due}
		add := func(c storm.Class, status int, at, took float64, retried, probe bool) {
			a := storm.Attempt{Op: i, Key: key, Attempt: len(op.Attempts) + 1, Sent: due + ms(at), Done: due + ms(at+took),
				Class: c, Status: status, Retried: retried, Probe: probe, Replayed: c == storm.ClassReplay}
			if probe {
				a.Attempt = 1
			}
			if c.Answered() {
				a.BodySHA256, a.Size, a.Snippet = sum, int64(len(body)), string(body[:min(len(body), 48)])
			} else {
				a.Error = "Post \"http://127.0.0.1:8080/v1/payments\": context deadline exceeded"
			}
			op.Attempts = append(op.Attempts, a)
			if !probe {
				attempts++
			}
		}
		final := true
		switch {
		case i%20 == 19 && n-attempts >= 4:
			for j := range 4 {
				add(storm.ClassTimeout, 0, float64(j)*250, 200, j < 3, false)
			}
			final = false
		case i%4 == 1 && n-attempts >= 3:
			add(storm.ClassTimeout, 0, 0, 200, true, false)
			add(storm.ClassInProgress, 409, 250, 2, true, false)
			add(storm.ClassReplay, 201, 1300, 2, false, false)
		case i%10 == 2 && n-attempts >= 2:
			add(storm.ClassServerError, 500, 0, 3, true, false)
			add(storm.ClassOriginal, 201, 100, 20, false, false)
		default:
			add(storm.ClassOriginal, 201, 0, 20, false, false)
		}
		op.Ended = op.Attempts[len(op.Attempts)-1].Done
		if final {
			add(storm.ClassReplay, 201, 60_000, 1, false, true)
		}
		h.Operations = append(h.Operations, op)
	}
	ops := len(h.Operations)
	h.Header.Settings = storm.Settings{Mode: "load", KeyHeader: "Idempotency-Key", Keys: ops, Dups: 1, Concurrency: 64,
		Timeout: 10 * time.Second, Retry: true, MaxRetries: 100, Probe: true, Rate: 1000, Duration: ms(float64(ops)),
		MaxInFlight: 1000, AttemptTimeout: 200 * time.Millisecond, Retries: 3, MaxFailures: 10}
	h.End = &storm.End{Elapsed: ms(float64(ops) + 2000), ProbeElapsed: 5 * time.Second}
	return h
}
