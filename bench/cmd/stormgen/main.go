// Command stormgen measures storm's load mode as a load generator, side by
// side with vegeta v12.13.0's attack: against a trivial handler
// in a process of its own, each generator in a process of its own (pinned
// to CPU 1 with taskset when it exists, the handler to CPU 0), the same
// requests at the same rates, alternating which goes first, several
// rounds; at 1,000/s and below (-floor-up-to), beside each generator
// (same CPU, same time) a floor: a pacer that sends nothing, whose start
// lag is the machine's. It prints medians (achieved rate over target, answered rate
// over target, start lag, the floor's beside it, connections dialed, CPU
// per request of the generator process, peak memory) and which of the
// issue's goals the run met.
//
//	go -C bench run ./cmd/stormgen -rates 1000,2000,4000,6000,8000 -rounds 3 -duration 4s
//	go -C bench run ./cmd/stormgen -rates 1000 -rounds 5 -duration 5s
//	go -C bench run ./cmd/stormgen -rates 2000,4000 -floor-up-to 4000   # the machine's stalls at higher rates too
//	go -C bench run ./cmd/stormgen -vegeta-nobind       # vegeta on a client that does not bind each connection too
//	go -C bench run ./cmd/stormgen -compare old=/tmp/stormgen-old   # storm as another build of stormgen runs it, side by side
//
// The figures go to bench/RESULTS.md by hand, under "Load generator".
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemkey/idemkey/bench"
)

func main() {
	var (
		serve    = flag.Bool("serve", false, "child: serve the trivial handler, print its URL, run until stdin closes")
		gen      = flag.String("gen", "", "child: run this generator (storm, vegeta, vegeta-nobind or floor) once and print its result as JSON")
		url      = flag.String("url", "", "child: the target URL")
		rate     = flag.Float64("rate", 1000, "child: requests per second")
		duration = flag.Duration("duration", 5*time.Second, "how long each run sends")
		rates    = flag.String("rates", "1000,2000,4000,6000,8000,10000,12000", "parent: target rates, comma separated")
		rounds   = flag.Int("rounds", 3, "parent: rounds per rate and generator")
		nobind   = flag.Bool("vegeta-nobind", false, "parent: also run vegeta on a client of its own that does not bind each connection")
		noPin    = flag.Bool("no-pin", false, "parent: do not pin processes to CPUs")
		profile  = flag.String("cpuprofile", "", "child: write a CPU profile of the generator run to `file`")
		memprof  = flag.String("memprofile", "", "child: write an allocation profile of the generator run to `file`")
		blockpro = flag.String("blockprofile", "", "child: write a block and a mutex profile (`file` and file.mutex) of the generator run")
		traceOut = flag.String("trace", "", "child: write an execution trace of the generator run to `file`")
		floorTo  = flag.Float64("floor-up-to", 1000, "parent: run a floor beside each generator at this `rate` and below (it takes a little of the generator's CPU)")
	)
	var compare []variant
	flag.Func("compare", "parent: also run storm as the stormgen binary at `name=path` runs it (repeatable; a stormgen with -floor-up-to or later): a before/after in one run", func(s string) error {
		name, path, ok := strings.Cut(s, "=")
		if !ok || name == "" || path == "" {
			return fmt.Errorf("want name=path, got %q", s)
		}
		compare = append(compare, variant{name, path})
		return nil
	})
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case *serve:
		err = serveChild(ctx)
	case *gen != "":
		if *profile != "" {
			f, perr := os.Create(*profile)
			if perr == nil {
				_ = pprof.StartCPUProfile(f)
				defer pprof.StopCPUProfile()
			}
		}
		stopProfiles := startProfiles(*memprof, *blockpro, *traceOut)
		err = genChild(ctx, *gen, *url, *rate, *duration)
		stopProfiles()
	default:
		err = parent(ctx, *rates, *rounds, *duration, !*noPin, *nobind, compare, *floorTo)
	}
	if err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "stormgen:", err)
		os.Exit(1)
	}
}

// variant is storm as another build of stormgen runs it (-compare).
type variant struct{ name, path string }

func names(vs []variant) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.name)
	}
	return out
}

func serveChild(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	u, err := bench.ServeTrivial(ctx)
	if err != nil {
		return err
	}
	fmt.Println(u)
	go func() { // the parent closes stdin to stop us
		b := make([]byte, 1)
		_, _ = os.Stdin.Read(b)
		cancel()
	}()
	<-ctx.Done()
	return nil
}

func genChild(ctx context.Context, gen, url string, rate float64, d time.Duration) error {
	var res bench.GenResult
	var err error
	switch gen {
	case "storm":
		res, err = bench.RunStormGen(ctx, url, rate, d)
	case "vegeta", "vegeta-nobind":
		res, err = bench.RunVegetaGen(ctx, url, rate, d, gen == "vegeta-nobind")
	case "floor":
		res, err = bench.RunFloor(ctx, rate, d)
	default:
		return fmt.Errorf("unknown generator %q", gen)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// run is one child generator run, as the parent measured it.
type run struct {
	bench.GenResult
	cpu      time.Duration
	maxRSS   int64
	floorP99 time.Duration // lag p99 of the floor beside it (-floor-up-to)
}

func parent(ctx context.Context, rateList string, rounds int, d time.Duration, pin, nobind bool, compare []variant, floorRate float64) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	_, tasksetErr := exec.LookPath("taskset")
	pin = pin && tasksetErr == nil
	command := func(cpu, bin string, args ...string) *exec.Cmd {
		if pin {
			return exec.CommandContext(ctx, "taskset", append([]string{"-c", cpu, bin}, args...)...)
		}
		return exec.CommandContext(ctx, bin, args...)
	}

	srv := command("0", self, "-serve")
	srv.Stderr = os.Stderr
	stdin, err := srv.StdinPipe()
	if err != nil {
		return err
	}
	out, err := srv.StdoutPipe()
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() {
		_ = stdin.Close()
		_ = srv.Wait()
	}()
	buf := make([]byte, 256)
	n, err := out.Read(buf)
	if err != nil {
		return fmt.Errorf("reading the server's URL: %w", err)
	}
	url := strings.TrimSpace(string(buf[:n]))
	conns := connsReader(url)

	var rates []float64
	for _, s := range strings.Split(rateList, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || r <= 0 {
			return fmt.Errorf("-rates: bad rate %q", s)
		}
		rates = append(rates, r)
	}
	fmt.Fprintf(os.Stderr, "stormgen: handler at %s; %d rounds of %s per rate and generator; pinned: %v\n", url, rounds, d, pin)

	bins := map[string]string{}
	var rows []bench.GenRow
	var loads []string
	for _, rate := range rates {
		runs := map[string][]run{}
		order := []string{"storm", "vegeta"}
		for _, v := range compare {
			order = append(order, v.name)
			bins[v.name] = v.path
		}
		if nobind {
			order = append(order, "vegeta-nobind")
		}
		for round := range rounds {
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, gen := range order {
				bin, child := self, gen
				if p, ok := bins[gen]; ok {
					bin, child = p, "storm"
				}
				waitTimeWait(ctx, url)
				load := loadAvg()
				loads = append(loads, load)
				before, err := conns()
				if err != nil {
					return err
				}
				// At the lag goal's rate, a floor beside the generator:
				// on its CPU, at the same time, so that both see the same
				// machine.
				var floor *exec.Cmd
				var floorOut strings.Builder
				if rate <= floorRate {
					floor = command("1", self, "-gen", "floor", "-rate", fmt.Sprint(rate), "-duration", d.String())
					floor.Stdout, floor.Stderr = &floorOut, os.Stderr
					if err := floor.Start(); err != nil {
						return err
					}
				}
				c := command("1", bin, "-gen", child, "-url", url, "-rate", fmt.Sprint(rate), "-duration", d.String())
				c.Stderr = os.Stderr
				b, err := c.Output()
				if err != nil {
					return fmt.Errorf("%s at %v/s: %w", gen, rate, err)
				}
				var r run
				if err := json.Unmarshal(b, &r.GenResult); err != nil {
					return fmt.Errorf("%s at %v/s: %w: %q", gen, rate, err, b)
				}
				r.Generator = gen
				if floor != nil {
					if err := floor.Wait(); err != nil {
						return fmt.Errorf("floor beside %s at %v/s: %w", gen, rate, err)
					}
					var f bench.GenResult
					if err := json.Unmarshal([]byte(floorOut.String()), &f); err != nil {
						return fmt.Errorf("floor beside %s at %v/s: %w: %q", gen, rate, err, floorOut.String())
					}
					r.floorP99 = f.LagP99
				}
				after, err := conns()
				if err != nil {
					return err
				}
				r.Conns = after - before - 1 // our own read
				st := c.ProcessState
				r.cpu = st.UserTime() + st.SystemTime()
				if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
					r.maxRSS = ru.Maxrss * 1024
				}
				runs[gen] = append(runs[gen], r)
				beside := ""
				if floor != nil {
					beside = fmt.Sprintf(" (floor beside it %s)", r.floorP99.Round(time.Microsecond))
				}
				fmt.Fprintf(os.Stderr, "  %-13s %6.0f/s round %d: sent %d, achieved %.1f/s, answered %.1f/s, lag p50 %s p99 %s%s, "+
					"%d connections, CPU %.1f µs/request, RSS %d MiB, errors %d; load average %s\n",
					gen, rate, round+1, r.Sent, r.Achieved, r.Throughput, r.LagP50.Round(time.Microsecond),
					r.LagP99.Round(time.Microsecond), beside, r.Conns, cpuPer(r), r.maxRSS>>20, r.Errors, load)
			}
		}
		v := median(runs["vegeta"])
		for _, gen := range append([]string{"storm"}, names(compare)...) {
			s := median(runs[gen])
			s.VegetaCPU = v.CPUPerRequest
			rows = append(rows, s)
		}
		rows = append(rows, v)
		if nobind {
			rows = append(rows, median(runs["vegeta-nobind"]))
		}
	}
	fmt.Printf("%s\n1-minute load average during the runs: %s\n\n", bench.GenTable(rows), loadRange(loads))
	fmt.Print(bench.GenGoals(rows))
	return nil
}

// connsReader returns the function that reads the connections the handler
// at url has accepted so far.
func connsReader(url string) func() (int, error) {
	u := url[:strings.Index(url[len("http://"):], "/")+len("http://")] + bench.ConnsPath
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	return func() (int, error) {
		resp, err := client.Get(u)
		if err != nil {
			return 0, fmt.Errorf("reading the handler's connections: %w", err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64))
		if err != nil {
			return 0, fmt.Errorf("reading the handler's connections: %w", err)
		}
		return strconv.Atoi(strings.TrimSpace(string(b)))
	}
}

// maxTimeWait bounds the sockets to the handler left in TIME-WAIT by the
// runs so far: each run closes up to bench.GenConnections connections, and
// vegeta's are bound to their port, which the machine's other users then
// cannot have for a minute.
const maxTimeWait = 3000

// waitTimeWait waits, at most 90 s, while more than maxTimeWait sockets to
// the handler at url are in TIME-WAIT.
func waitTimeWait(ctx context.Context, url string) {
	port, _, _ := strings.Cut(strings.TrimPrefix(url, "http://127.0.0.1:"), "/")
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return
	}
	for i := 0; i < 90 && ctx.Err() == nil; i++ {
		n := timeWait(uint16(p))
		if n <= maxTimeWait {
			return
		}
		if i == 0 {
			fmt.Fprintf(os.Stderr, "  (%d sockets in TIME-WAIT to the handler: waiting for them to clear)\n", n)
		}
		time.Sleep(time.Second)
	}
}

// timeWait counts the IPv4 sockets in TIME-WAIT from or to port.
func timeWait(port uint16) int {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0
	}
	hex := fmt.Sprintf(":%04X", port)
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && f[3] == "06" && (strings.HasSuffix(f[1], hex) || strings.HasSuffix(f[2], hex)) {
			n++
		}
	}
	return n
}

// loadAvg returns the 1-minute load average, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

// loadRange renders the lowest and highest of the load averages read.
func loadRange(loads []string) string {
	var v []float64
	for _, s := range loads {
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			v = append(v, f)
		}
	}
	if len(v) == 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f to %.1f (%d cores)", slices.Min(v), slices.Max(v), runtime.NumCPU())
}

func cpuPer(r run) float64 {
	if r.Sent == 0 {
		return 0
	}
	return float64(r.cpu) / float64(r.Sent) / float64(time.Microsecond)
}

// median takes each figure's median over the rounds.
func median(runs []run) bench.GenRow {
	pick := func(f func(run) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	row := bench.GenRow{GenResult: runs[0].GenResult}
	row.Sent = int(pick(func(r run) float64 { return float64(r.Sent) }))
	row.Errors = int(pick(func(r run) float64 { return float64(r.Errors) }))
	row.Achieved = pick(func(r run) float64 { return r.Achieved })
	row.Throughput = pick(func(r run) float64 { return r.Throughput })
	row.Conns = int(pick(func(r run) float64 { return float64(r.Conns) }))
	row.LagP50 = time.Duration(pick(func(r run) float64 { return float64(r.LagP50) }))
	row.LagP99 = time.Duration(pick(func(r run) float64 { return float64(r.LagP99) }))
	row.LatencyP99 = time.Duration(pick(func(r run) float64 { return float64(r.LatencyP99) }))
	row.CPUPerRequest = time.Duration(pick(func(r run) float64 { return cpuPer(r) }) * float64(time.Microsecond))
	row.MaxRSS = int64(pick(func(r run) float64 { return float64(r.maxRSS) }))
	if runs[0].floorP99 > 0 {
		row.FloorP99 = time.Duration(pick(func(r run) float64 { return float64(r.floorP99) }))
		row.LagOverFloor = time.Duration(pick(func(r run) float64 { return float64(r.LagP99 - r.floorP99) }))
	}
	return row
}

// startProfiles starts the child's optional profiles and returns the
// function that writes them.
func startProfiles(mem, block, traceFile string) func() {
	if mem != "" {
		runtime.MemProfileRate = 4096
	}
	if block != "" {
		runtime.SetBlockProfileRate(10_000) // a sample per 10 µs blocked
		runtime.SetMutexProfileFraction(10)
	}
	var tf *os.File
	if traceFile != "" {
		if f, err := os.Create(traceFile); err == nil && trace.Start(f) == nil {
			tf = f
		}
	}
	write := func(name, file string) {
		if f, err := os.Create(file); err == nil {
			_ = pprof.Lookup(name).WriteTo(f, 0)
			_ = f.Close()
		}
	}
	return func() {
		if tf != nil {
			trace.Stop()
			_ = tf.Close()
		}
		if mem != "" {
			write("allocs", mem)
		}
		if block != "" {
			write("block", block)
			write("mutex", block+".mutex")
		}
	}
}
