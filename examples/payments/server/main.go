// Command server runs the payments example API, on an embedded in-memory
// Redis unless it is given one:
//
//	go run ./examples/payments/server
//	go run ./examples/payments/server -redis redis://127.0.0.1:6379/0 -addr 127.0.0.1:8080
//
// Without -redis it uses $REDIS_URL if set, else an embedded miniredis; it
// never connects to a Redis it was not pointed at.
//
// "idemkey serve" runs the same API with more switches (embedded Redis,
// fault drills).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/idemkey/idemkey/examples/internal/devredis"
	"github.com/idemkey/idemkey/examples/payments"
	"github.com/idemkey/idemkey/ginmw"
	"github.com/idemkey/idemkey/redisstore"
)

func main() {
	gin.SetMode(gin.ReleaseMode)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

// run serves the API until ctx ends, then shuts down gracefully.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen `address`")
	latency := fs.Duration("provider-latency", 50*time.Millisecond, "simulated provider latency")
	redisURL := fs.String("redis", "", "Redis `URL` (default $REDIS_URL, else an embedded miniredis)")
	fs.SetOutput(stdout)
	if err := fs.Parse(args); err != nil {
		return err
	}
	url := *redisURL
	if url == "" { // read after parsing: a flag's default is printed by -h, password and all
		url = getenv("REDIS_URL")
	}
	rdb, where, closeRedis, err := devredis.Open(url)
	if err != nil {
		return err
	}
	defer closeRedis()
	fmt.Fprintf(stdout, "redis: %s\n", where)

	// RequireNoEviction: on a Redis that may evict records, claims fail
	// (503) instead of serving without the guarantee. The embedded
	// miniredis says it never evicts (devredis.AnswerConfig).
	store, err := redisstore.New(rdb, redisstore.Options{Lease: 10 * time.Second, Retention: 24 * time.Hour, RequireNoEviction: true})
	if err != nil {
		return err
	}
	api, err := payments.New(payments.Config{
		Redis: rdb,
		Store: store,
		// On SIGTERM (ctx done) new requests get 503 and running ones 5s
		// (ShutdownGrace) to finish; the retries of any cut off then take
		// over on another instance.
		Idempotency:     ginmw.Options{Wait: 2 * time.Second, Shutdown: ctx},
		ProviderLatency: *latency,
	})
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "listening on http://%s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	slog.Info("shutting down")
	// The grace (5s), then the lease (10s) at most for the cut-off runs.
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
