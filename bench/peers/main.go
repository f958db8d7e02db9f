// Command peers benchmarks the most-used Go idempotency middleware, the one
// of gofiber/fiber v3 (middleware/idempotency) with gofiber/storage's Redis
// storage, against a private redis-server it launches itself.
//
// It measures first-execution throughput of a bare fiber handler and of the
// same handler behind the middleware (alternating them for several rounds),
// replay throughput, and the outcome of a retry storm (internal/storm)
// against one and against two app instances sharing the same Redis.
//
// Usage:
//
//	go run . [-rounds 3] [-duration 2s] [-concurrency 64] [-replay-keys 1000]
//	         [-keys 2000] [-dups 10] [-storm-concurrency 128] [-two-instances=true] [-json]
//
// The summary goes to stdout (a single JSON object with -json); progress
// goes to stderr.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idemkey/idemkey/internal/redistest"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := defaultOptions()
	fs.IntVar(&o.Rounds, "rounds", o.Rounds, "number of alternating bare/idempotency rounds")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "duration of each throughput measurement")
	fs.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "keep-alive clients for the throughput measurements")
	fs.IntVar(&o.ReplayKeys, "replay-keys", o.ReplayKeys, "keys pre-populated for the replay measurement")
	fs.IntVar(&o.Keys, "keys", o.Keys, "storm: distinct idempotency keys")
	fs.IntVar(&o.Dups, "dups", o.Dups, "storm: identical requests per key")
	fs.IntVar(&o.StormConcurrency, "storm-concurrency", o.StormConcurrency, "storm: concurrent workers")
	fs.BoolVar(&o.TwoInstances, "two-instances", o.TwoInstances, "also storm two app instances sharing the same Redis")
	asJSON := fs.Bool("json", false, "print a single JSON object instead of the text summary")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "peers: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := o.validate(); err != nil {
		fmt.Fprintf(stderr, "peers: %v\n", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir, err := os.MkdirTemp("", "idemkey-peers-")
	if err != nil {
		fmt.Fprintf(stderr, "peers: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := redistest.Launch(dir)
	if err != nil {
		fmt.Fprintf(stderr, "peers: %v\n", err)
		return 1
	}
	defer srv.Close()

	o.Log = stderr
	res, err := bench(ctx, o, "127.0.0.1", srv.Port())
	if err != nil {
		fmt.Fprintf(stderr, "peers: %v\n", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(res)
	} else {
		err = res.writeText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "peers: %v\n", err)
		return 1
	}
	return 0
}

// options are the knobs of a run.
type options struct {
	Rounds           int
	Duration         time.Duration
	Concurrency      int
	ReplayKeys       int
	Keys             int
	Dups             int
	StormConcurrency int
	TwoInstances     bool
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

func defaultOptions() options {
	return options{
		Rounds:           3,
		Duration:         2 * time.Second,
		Concurrency:      64,
		ReplayKeys:       1000,
		Keys:             2000,
		Dups:             10,
		StormConcurrency: 128,
		TwoInstances:     true,
	}
}

func (o options) validate() error {
	switch {
	case o.Rounds < 1:
		return fmt.Errorf("-rounds must be at least 1")
	case o.Duration <= 0:
		return fmt.Errorf("-duration must be positive")
	case o.Concurrency < 1 || o.StormConcurrency < 1:
		return fmt.Errorf("-concurrency and -storm-concurrency must be at least 1")
	case o.ReplayKeys < 1 || o.Keys < 1 || o.Dups < 1:
		return fmt.Errorf("-replay-keys, -keys and -dups must be at least 1")
	}
	return nil
}
