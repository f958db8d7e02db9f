package bench

import (
	"context"
	"net/http"
	"runtime/pprof"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkCPU measures the process's CPU time per request (user + system,
// getrusage) of the floor, the limit and ours, first executions and
// replays, each served in process through httptest by cpuWorkers
// goroutines, on a redis-server of its own. The contenders take turns in
// rounds of cpuChunk requests, so a busy machine slows them alike: CPU time
// is what a request costs this process, not how long it waited. The
// differences against the floor are our Go work (redis-server's CPU is
// another process and not counted).
//
//	go -C bench test . -run '^$' -bench CPU -benchtime 20x
//
// b.N is the number of rounds. Metrics: µs of CPU per request per contender
// and case, and ours minus the floor.
func BenchmarkCPU(b *testing.B) {
	ctx := context.Background()
	a := &app{}
	names := []string{Floor, Limit, Ours}
	hs := map[string]http.Handler{}
	for _, name := range names {
		sp, _ := specOf(name)
		h, _, err := sp.handler(ctx, a, backend(b, "redis"))
		if err != nil {
			b.Fatal(err)
		}
		hs[name] = h
	}
	prefix := unique(b)
	replayKeys := map[string][]string{}
	for _, name := range names {
		for i := range cpuWorkers {
			key := prefix + name + "-replay-" + strconv.Itoa(i)
			if err := serveOnce(hs[name], key, http.StatusCreated); err != nil {
				b.Fatal(err)
			}
			replayKeys[name] = append(replayKeys[name], key)
		}
		// Warm up: connections, scripts, the first GC cycles.
		if _, err := cpuChunk(hs[name], prefix+name+"-warm-", nil, "warm-up"); err != nil {
			b.Fatal(err)
		}
	}
	cpu := map[string][]float64{} // µs per request, per round
	b.ResetTimer()
	for round := 0; b.Loop(); round++ {
		for i := range names {
			name := names[(round+i)%len(names)]
			first, err := cpuChunk(hs[name], prefix+name+"-"+strconv.Itoa(round)+"-", nil, name+"/first")
			if err != nil {
				b.Fatal(err)
			}
			replay, err := cpuChunk(hs[name], "", replayKeys[name], name+"/replay")
			if err != nil {
				b.Fatal(err)
			}
			cpu[name+"/first"] = append(cpu[name+"/first"], perRequest(first))
			cpu[name+"/replay"] = append(cpu[name+"/replay"], perRequest(replay))
		}
	}
	// Medians over the rounds: of each figure, and of the per-round
	// differences, which a busy round moves less.
	for _, cs := range []string{"first", "replay"} {
		for _, name := range names {
			b.ReportMetric(median(cpu[name+"/"+cs]), name+"-"+cs+"-µs/op")
		}
		var diff []float64
		for i, v := range cpu[Ours+"/"+cs] {
			diff = append(diff, v-cpu[Floor+"/"+cs][i])
		}
		b.ReportMetric(median(diff), "ours-floor-"+cs+"-µs/op")
	}
	b.ReportMetric(0, "ns/op")
}

func perRequest(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / cpuRequests }

const (
	cpuWorkers  = 8
	cpuRequests = 1600 // per contender, case and round
)

// cpuChunk serves cpuRequests requests through h on cpuWorkers goroutines,
// first executions of fresh keys under prefix, or replays of keys, and
// returns the process's CPU time meanwhile. The goroutines carry the
// profiler label case=label (-cpuprofile, then pprof -tagfocus): the
// samples of the garbage collector's workers and of the runtime have none.
func cpuChunk(h http.Handler, prefix string, keys []string, label string) (time.Duration, error) {
	before := processCPU()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for w := range cpuWorkers {
		wg.Add(1)
		go pprof.Do(context.Background(), pprof.Labels("case", label), func(context.Context) {
			defer wg.Done()
			for i := w; i < cpuRequests; i += cpuWorkers {
				key := prefix + strconv.Itoa(i)
				if keys != nil {
					key = keys[i%len(keys)]
				}
				if err := serveOnce(h, key, http.StatusCreated); err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return processCPU() - before, first
}

// processCPU returns the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
