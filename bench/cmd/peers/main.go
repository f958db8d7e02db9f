// Command peers runs package peers (fiber v3's idempotency middleware on
// gofiber/storage's Redis storage) against a private redis-server it
// launches itself.
//
// Usage:
//
//	go -C bench run ./cmd/peers [-rounds 3] [-duration 2s] [-concurrency 64] [-replay-keys 1000]
//	                            [-keys 2000] [-dups 10] [-storm-concurrency 128] [-two-instances=true] [-json]
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

	"github.com/idemkey/idemkey/bench/peers"
	"github.com/idemkey/idemkey/internal/redistest"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := peers.DefaultOptions()
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
	if err := o.Validate(); err != nil {
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
	res, err := peers.Run(ctx, o, "127.0.0.1", srv.Port())
	if err != nil {
		fmt.Fprintf(stderr, "peers: %v\n", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(res)
	} else {
		err = res.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "peers: %v\n", err)
		return 1
	}
	return 0
}
