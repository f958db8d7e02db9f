// Command storm-bench runs idemkey's benchmark scenarios and writes
// bench/RESULTS.md. See bench/README.md.
//
// Usage (from the repository's root):
//
//	go -C bench run ./cmd/storm-bench [-quick] [-rounds 5] [-duration 1.5s] [-phases first,replay,...]
//	                                  [-contenders floor,limit,ours,...]
//	                                  [-results RESULTS.md] [-write=true] [-json FILE]
//	                                  [-cpuprofile FILE] [-memprofile FILE]
//
// It exits 0 when every check passed, 1 when one failed, 2 on a usage error
// or when a measurement could not be made.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/idemkey/idemkey/bench"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("storm-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "smoke run: 1 round of 300ms phases, a 300-key storm, no peers, RESULTS.md not written")
	d := bench.DefaultConfig()
	rounds := fs.Int("rounds", d.Rounds, "rounds of the contenders in turn")
	duration := fs.Duration("duration", d.Duration, "length of each throughput measurement")
	conc := fs.Int("concurrency", d.Concurrency, "keep-alive clients of the throughput measurements")
	replayKeys := fs.Int("replay-keys", d.ReplayKeys, "keys stored for the replay measurement")
	keys := fs.Int("keys", d.StormKeys, "storm: distinct idempotency keys")
	dups := fs.Int("dups", d.StormDups, "storm: simultaneous duplicates per key")
	stormConc := fs.Int("storm-concurrency", d.StormConcurrency, "storm: concurrent workers")
	costReqs := fs.Int("cost-requests", d.CostRequests, "requests per case when counting Redis commands")
	allocRuns := fs.Int("alloc-runs", d.AllocRuns, "requests per case when counting Go allocations")
	phases := fs.String("phases", "all", "comma-separated phases to run: "+strings.Join(bench.AllPhases, ","))
	contenders := fs.String("contenders", "all", "comma-separated contenders to measure (ours always): "+strings.Join(bench.ContenderNames(), ","))
	moduleDir := fs.String("bench-dir", "", "directory of the bench module (default: found from the working directory)")
	results := fs.String("results", "", "Markdown file the results are written to (default: RESULTS.md of the bench module)")
	write := fs.Bool("write", true, "write the results file (default false with -quick)")
	jsonOut := fs.String("json", "", "also write every figure as JSON to this file")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memprofile := fs.String("memprofile", "", "write an allocation profile of the whole run to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "storm-bench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	cfg := d
	if *quick {
		cfg = bench.QuickConfig()
		if !set["write"] {
			*write = false
		}
	}
	// Explicit flags override the defaults of either mode.
	for name, apply := range map[string]func(){
		"rounds":            func() { cfg.Rounds = *rounds },
		"duration":          func() { cfg.Duration = *duration },
		"concurrency":       func() { cfg.Concurrency = *conc },
		"replay-keys":       func() { cfg.ReplayKeys = *replayKeys },
		"keys":              func() { cfg.StormKeys = *keys },
		"dups":              func() { cfg.StormDups = *dups },
		"storm-concurrency": func() { cfg.StormConcurrency = *stormConc },
		"cost-requests":     func() { cfg.CostRequests = *costReqs },
		"alloc-runs":        func() { cfg.AllocRuns = *allocRuns },
	} {
		if set[name] {
			apply()
		}
	}
	if set["phases"] && *phases != "all" {
		cfg.Phases = strings.Split(*phases, ",")
	}
	if set["contenders"] && *contenders != "all" {
		cfg.Contenders = strings.Split(*contenders, ",")
	}
	cfg.ModuleDir = *moduleDir
	if cfg.ModuleDir == "" {
		dir, err := bench.FindModule()
		if err != nil {
			fmt.Fprintf(stderr, "storm-bench: %v; pass -bench-dir\n", err)
			return 2
		}
		cfg.ModuleDir = dir
	}
	if *results == "" {
		*results = filepath.Join(cfg.ModuleDir, "RESULTS.md")
	}
	cfg.Log = stderr
	cfg.Command = strings.TrimSpace("go -C bench run ./cmd/storm-bench " + strings.Join(args, " "))

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintf(stderr, "storm-bench: %v\n", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "storm-bench: %v\n", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	if *memprofile != "" {
		runtime.MemProfileRate = 64 << 10
		defer func() {
			f, err := os.Create(*memprofile)
			if err == nil {
				err = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
			if err != nil {
				fmt.Fprintf(stderr, "storm-bench: %v\n", err)
			}
		}()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "storm-bench: %v\n", err)
		return 2
	}
	res.WriteText(stdout)
	if *write {
		if err := bench.WriteResultsFile(*results, res); err != nil {
			fmt.Fprintf(stderr, "storm-bench: %v\n", err)
			return 2
		}
		fmt.Fprintf(stdout, "\nwrote %s\n", *results)
	}
	if *jsonOut != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err == nil {
			err = os.WriteFile(*jsonOut, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintf(stderr, "storm-bench: %v\n", err)
			return 2
		}
	}
	if !res.Pass() {
		return 1
	}
	return 0
}
