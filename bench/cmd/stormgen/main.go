// Command stormgen measures storm's load mode as a load generator, side by
// side with vegeta v12.13.0's attack (issue 28): against a trivial handler
// in a process of its own, each generator in a process of its own (pinned
// to CPU 1 with taskset when it exists, the handler to CPU 0), the same
// requests at the same rates, alternating which goes first, several
// rounds; it prints medians: achieved rate over target, start lag, CPU per
// request of the generator process and its peak memory.
//
//	go -C bench run ./cmd/stormgen                      # 1,000/s, then rising rates, 3 rounds
//	go -C bench run ./cmd/stormgen -rates 1000 -rounds 5 -duration 10s
//	go -C bench run ./cmd/stormgen -vegeta-nobind       # vegeta on a client that does not bind each connection too
//
// The figures go to bench/RESULTS.md by hand, under "Load generator".
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
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
		gen      = flag.String("gen", "", "child: run this generator (storm or vegeta) once and print its result as JSON")
		url      = flag.String("url", "", "child: the target URL")
		rate     = flag.Float64("rate", 1000, "child: requests per second")
		duration = flag.Duration("duration", 5*time.Second, "how long each run sends")
		rates    = flag.String("rates", "1000,2000,4000,6000,8000,10000,12000", "parent: target rates, comma separated")
		rounds   = flag.Int("rounds", 3, "parent: rounds per rate and generator")
		nobind   = flag.Bool("vegeta-nobind", false, "parent: also run vegeta on a client of its own that does not bind each connection")
		noPin    = flag.Bool("no-pin", false, "parent: do not pin processes to CPUs")
		profile  = flag.String("cpuprofile", "", "child: write a CPU profile of the generator run to `file`")
	)
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
		err = genChild(ctx, *gen, *url, *rate, *duration)
	default:
		err = parent(ctx, *rates, *rounds, *duration, !*noPin, *nobind)
	}
	if err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "stormgen:", err)
		os.Exit(1)
	}
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
	cpu    time.Duration
	maxRSS int64
}

func parent(ctx context.Context, rateList string, rounds int, d time.Duration, pin, nobind bool) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	_, tasksetErr := exec.LookPath("taskset")
	pin = pin && tasksetErr == nil
	command := func(cpu string, args ...string) *exec.Cmd {
		if pin {
			return exec.CommandContext(ctx, "taskset", append([]string{"-c", cpu, self}, args...)...)
		}
		return exec.CommandContext(ctx, self, args...)
	}

	srv := command("0", "-serve")
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

	var rates []float64
	for _, s := range strings.Split(rateList, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || r <= 0 {
			return fmt.Errorf("-rates: bad rate %q", s)
		}
		rates = append(rates, r)
	}
	fmt.Fprintf(os.Stderr, "stormgen: handler at %s; %d rounds of %s per rate and generator; pinned: %v\n", url, rounds, d, pin)

	var rows []bench.GenRow
	for _, rate := range rates {
		runs := map[string][]run{}
		for round := range rounds {
			order := []string{"storm", "vegeta"}
			if nobind {
				order = append(order, "vegeta-nobind")
			}
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, gen := range order {
				c := command("1", "-gen", gen, "-url", url, "-rate", fmt.Sprint(rate), "-duration", d.String())
				c.Stderr = os.Stderr
				b, err := c.Output()
				if err != nil {
					return fmt.Errorf("%s at %v/s: %w", gen, rate, err)
				}
				var r run
				if err := json.Unmarshal(b, &r.GenResult); err != nil {
					return fmt.Errorf("%s at %v/s: %w: %q", gen, rate, err, b)
				}
				st := c.ProcessState
				r.cpu = st.UserTime() + st.SystemTime()
				if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
					r.maxRSS = ru.Maxrss * 1024
				}
				runs[gen] = append(runs[gen], r)
				fmt.Fprintf(os.Stderr, "  %-6s %6.0f/s round %d: sent %d, achieved %.1f/s, lag p99 %s, CPU %.1f µs/request, RSS %d MiB, errors %d\n",
					gen, rate, round+1, r.Sent, r.Achieved, r.LagP99, cpuPer(r), r.maxRSS>>20, r.Errors)
			}
		}
		v := median(runs["vegeta"])
		s := median(runs["storm"])
		s.VegetaCPU = v.CPUPerRequest
		rows = append(rows, s, v)
		if nobind {
			rows = append(rows, median(runs["vegeta-nobind"]))
		}
	}
	fmt.Println(bench.GenTable(rows))
	return nil
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
	row.LagP50 = time.Duration(pick(func(r run) float64 { return float64(r.LagP50) }))
	row.LagP99 = time.Duration(pick(func(r run) float64 { return float64(r.LagP99) }))
	row.LatencyP99 = time.Duration(pick(func(r run) float64 { return float64(r.LatencyP99) }))
	row.CPUPerRequest = time.Duration(pick(func(r run) float64 { return cpuPer(r) }) * float64(time.Microsecond))
	row.MaxRSS = int64(pick(func(r run) float64 { return float64(r.maxRSS) }))
	return row
}
