package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/examples/payments"
	"github.com/idemkey/idemkey/ginmw"
	"github.com/idemkey/idemkey/internal/metrics"
	"github.com/idemkey/idemkey/redisstore"
)

const serveAbout = `Serves the example payments API (package examples/payments), protected by
the Gin middleware:

  POST /v1/payments      Idempotency-Key and Authorization: Bearer <token> required;
                         body {"amount": 1200, "currency": "EUR", "customer": "cus_1"}
  GET  /v1/payments/ID   one of the caller's payments
  GET  /v1/stats         {"payments_created", "provider_charges", "provider_deduplicated"}
  GET  /metrics          idemkey's metrics, in the Prometheus text format (the
                         names of the prometheus module: idemkey_requests_total...)

Redis comes from --redis, else $REDIS_URL, else an embedded in-memory
miniredis that is gone when serve exits. Idempotency records live under
"idem:", the demo's data (payments, the simulated provider's charges) under
"demo:". The idempotency scope of a caller is payments.Scope(token); find a
record with 'idemkey inspect --bearer TOKEN KEY'. With --redis, serve runs
the checks of 'idemkey doctor' at start and prints what is not ok.

The store runs on go-redis's auto-pipeliner, which batches the calls of
concurrent requests (docs/pipelining.md); --no-pipeline sends each on its
own.

With --wait, a duplicate of a request in progress waits for its answer
instead of getting 409 at once (--wait 0 gives the plain 409 contract).

--faults enables the X-Demo-Fault request header:
  provider-unavailable  the provider fails before charging: 503, key released
  crash-after-charge    the process exits at once (status 3) right after the
                        charged checkpoint; a retry after --lease resumes
  drop-response         the payment is made and its outcome stored, then the
                        connection is closed without an answer; a retry with
                        the same key gets the stored answer

Stops gracefully on SIGINT or SIGTERM: new requests get 503 shutting-down,
running ones --shutdown-grace to finish; those still running are then cut
off, and their retries (on another instance) take over from the last
checkpoint. Exit status: 0 after a clean stop, 1 if Redis or the listener
fails, 2 on a usage error, 3 after a crash-after-charge drill.
`

// crashExitCode is the exit status of a crash-after-charge drill.
const crashExitCode = 3

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve", "[flags]", serveAbout, stderr)
	var (
		addr       = fs.String("addr", "127.0.0.1:8080", "listen `address`; port 0 picks a free one")
		redisValue = redisFlag(fs, "Redis `address`: host:port[/db] or a redis:// or rediss:// URL; default $REDIS_URL, else embedded miniredis")
		lease      = fs.Duration("lease", 10*time.Second, "idempotency lease: how long a crashed attempt blocks its key")
		retention  = fs.Duration("retention", 24*time.Hour, "how long completed outcomes are replayed")
		latency    = fs.Duration("provider-latency", 50*time.Millisecond, "time each call to the simulated provider takes")
		wait       = fs.Duration("wait", 2*time.Second, "how long a duplicate waits for the first attempt before 409")
		grace      = fs.Duration("shutdown-grace", 5*time.Second, "on SIGTERM, how long running requests may go on before they are cut off (their retries take over); 0 cuts them off at once")
		faults     = fs.Bool("faults", false, "enable the X-Demo-Fault header for fault drills")
		plain      = fs.Bool("no-pipeline", false, "send each store call on its own instead of through go-redis's auto-pipeliner")
	)
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "serve", "unexpected argument %q", fs.Arg(0))
	}
	if *wait < 0 || *latency < 0 {
		return usageError(stderr, "serve", "--wait and --provider-latency must not be negative")
	}
	redisURL := redisValue()
	if redisURL != "" {
		if _, err := redisOptions(redisURL); err != nil {
			return usageError(stderr, "serve", "%v", err)
		}
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))

	var rdb *redis.Client
	if redisURL == "" {
		mr, c, err := embedded()
		if err != nil {
			fmt.Fprintf(stderr, "idemkey serve: %v\n", err)
			return 1
		}
		defer mr.Close()
		rdb = c
		fmt.Fprintf(stdout, "redis: embedded miniredis at redis://%s (in memory, gone on exit; set --redis or %s for a real Redis)\n", mr.Addr(), redisEnv)
	} else {
		c, err := connect(ctx, redisURL)
		if err != nil {
			fmt.Fprintf(stderr, "idemkey serve: %v\n", err)
			return 1
		}
		rdb = c
		fmt.Fprintf(stdout, "redis: %s\n", redisName(rdb))
	}
	defer rdb.Close()

	exporter := metrics.NewExporter()
	sc, err := storeClient(rdb, *plain)
	if err != nil {
		fmt.Fprintf(stderr, "idemkey serve: %v\n", err)
		return 1
	}
	// An embedded miniredis neither evicts nor persists: nothing for the
	// start-up check to warn about (a real Redis is checked).
	store, err := redisstore.New(sc, redisstore.Options{Lease: *lease, Retention: *retention, Observer: exporter, NoStartupCheck: redisURL == ""})
	if err != nil {
		return usageError(stderr, "serve", "%v", err)
	}
	if redisURL != "" {
		// Check through the client itself: through the pipeliner, which
		// hides it, Check could not tell a single node from a Ring.
		opts := store.Options()
		opts.Observer = nil
		checker, err := redisstore.New(rdb, opts)
		if err != nil {
			return usageError(stderr, "serve", "%v", err)
		}
		checkAtStart(ctx, checker, stderr)
	}
	api, err := payments.New(payments.Config{
		Redis:           rdb,
		Store:           store,
		Idempotency:     ginmw.Options{Wait: *wait, Shutdown: ctx, ShutdownGrace: cmp.Or(max(*grace, 0), -1), Logger: logger},
		ProviderLatency: *latency,
		Faults:          *faults,
		Crash: func() {
			fmt.Fprintln(stderr, "idemkey serve: crash-after-charge drill: exiting now, without cleanup or response")
			os.Exit(crashExitCode)
		},
		Logger: logger,
	})
	if err != nil {
		return usageError(stderr, "serve", "%v", err)
	}
	so := store.Options()
	fmt.Fprintf(stdout, "idempotency records under %q (lease %s, retention %s), demo data under %q; duplicates wait up to %s\n",
		so.Prefix, so.Lease, so.Retention, "demo:", *wait)
	if *faults {
		fmt.Fprintf(stdout, "fault drills on: %s: %s | %s | %s\n", payments.FaultHeader, payments.FaultProviderUnavailable, payments.FaultCrashAfterCharge, payments.FaultDropResponse)
		if redisURL == "" {
			fmt.Fprintln(stdout, "note: a crash drill takes the embedded Redis down with it; use --redis to resume after a restart")
		}
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(stderr, "idemkey serve: %v\n", err)
		return 1
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", exporter)
	mux.Handle("/", api)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "listening on http://%s\n", ln.Addr())

	select {
	case err := <-errc:
		fmt.Fprintf(stderr, "idemkey serve: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	fmt.Fprintln(stdout, "shutting down")
	// Running requests get the grace, then those cut off end their leases.
	sctx, cancel := context.WithTimeout(context.Background(), max(*grace, 0)+max(*lease, 2*time.Second)+5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		fmt.Fprintf(stderr, "idemkey serve: shutdown: %v\n", err)
		return 1
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "idemkey serve: %v\n", err)
		return 1
	}
	return 0
}
