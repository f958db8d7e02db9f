package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/examples/payments"
	"github.com/idemkey/idemkey/ginmw"
	"github.com/idemkey/idemkey/redisstore"
	"github.com/idemkey/idemkey/storm"
)

const demoAbout = `Starts an embedded Redis (miniredis) and the example payments API on a free
loopback port and fires a retry storm at it (every key sent several times at
once, each key its own payment, with --retry, the late probe and the count
check on the API's /v1/stats provider_charges). Then it reads the side
effects back from Redis: payments created and provider charges must both
equal the number of keys. No Redis needed.

With --flaky it sends --keys payments through idemclient's retrying
transport instead, one at a time per worker, against the API behind a
flaky network: a share of answers (--drop) is lost after the payment is
made and stored, and a share of attempts (--unavailable) gets 503 from the
provider. Every payment must end with one 201 and one charge; the demo
prints how many retries that took.

With --storm it runs a retry storm in load mode instead: --rate payments a
second for --duration, each with its own key, from clients that give up on an
attempt after --attempt-timeout and retry with the same key (up to --retries
times, after Retry-After or a backoff), while the provider is slowed to
--slow-latency for --slow-for from --slow-at on. The report shows the
amplification the slow provider caused, second by second, and the count
check shows that every payment was charged once; --report writes it as one
HTML file.

With --storm --metastable it reproduces a metastable failure: the API serves
with a bounded pool of workers that a request whose client gave up still
occupies, and its provider, behind storm's fault hop (--proxy), slows down
for 5s. The storm runs two arms on the same schedule, naive retries and a
retry budget (--retry-policy naive,budget): naive's retries keep the pool
saturated after the provider is fast again, budget's recover. --json prints
the report as JSON; --report writes the HTML, the arms overlaid.

Exit status: 0 when every key ran exactly once, 1 if not, 2 on a usage error.
`

func demo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("demo", "[flags]", demoAbout, stderr)
	var (
		keys    = fs.Int("keys", 300, "distinct idempotency keys, one payment each")
		dups    = fs.Int("dups", 5, "identical requests per key, sent concurrently")
		conc    = fs.Int("concurrency", 50, "concurrent requests")
		latency = fs.Duration("provider-latency", 20*time.Millisecond, "time each call to the simulated provider takes")
		flaky   = fs.Bool("flaky", false, "send payments through idemclient's transport against a flaky server instead of a storm")
		drop    = fs.Float64("drop", 0.2, "with --flaky: the `share` of executions whose answer is lost after it is stored")
		unavail = fs.Float64("unavailable", 0.1, "with --flaky: the `share` of attempts answered 503 by the provider")
		seed    = fs.Uint64("seed", 1, "with --flaky: the seed of the faults")

		stormMode   = fs.Bool("storm", false, "run a retry storm in load mode while the provider is slow for a while")
		rate        = fs.Float64("rate", 50, "with --storm: payments started per `second`")
		duration    = fs.Duration("duration", 10*time.Second, "with --storm: how long payments are started")
		slowAt      = fs.Duration("slow-at", 3*time.Second, "with --storm: when the provider slows down, from the start")
		slowFor     = fs.Duration("slow-for", 3*time.Second, "with --storm: how long it stays slow")
		slowLatency = fs.Duration("slow-latency", 1500*time.Millisecond, "with --storm: the provider's latency while slow")
		attemptTO   = fs.Duration("attempt-timeout", 500*time.Millisecond, "with --storm: the clients' timeout of one attempt")
		retries     = fs.Int("retries", 5, "with --storm: retries of each payment")
		report      = fs.String("report", "", "with --storm: write the report as one self-contained HTML `file`")
		metastable  = fs.Bool("metastable", false, "with --storm: a slowdown that naive retries turn into a metastable failure, and a retry budget survives (two arms)")
		asJSON      = fs.Bool("json", false, "with --storm --metastable: print the report as one JSON object")
	)
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *metastable || *asJSON {
		switch {
		case !*stormMode || !*metastable:
			return usageError(stderr, "demo", "--metastable goes with --storm, and --json with both")
		case fs.NArg() > 0:
			return usageError(stderr, "demo", "unexpected argument %q", fs.Arg(0))
		case !metastableFlagsOK(set):
			return usageError(stderr, "demo", "%v", errMetastableFlags)
		}
		cfg := defaultMetastable
		cfg.report, cfg.json = *report, *asJSON
		code, _ := metastableDemo(ctx, cfg, stdout, stderr)
		return code
	}
	if *stormMode {
		switch {
		case fs.NArg() > 0:
			return usageError(stderr, "demo", "unexpected argument %q", fs.Arg(0))
		case *flaky:
			return usageError(stderr, "demo", "--storm and --flaky are two demos: pick one")
		case !(*rate > 0) || *rate > 5000:
			return usageError(stderr, "demo", "--rate must be above 0 and at most 5000")
		case *duration <= 0 || *duration > 10*time.Minute:
			return usageError(stderr, "demo", "--duration must be above 0 and at most 10m")
		case *slowAt < 0 || *slowFor < 0 || *slowLatency < 0 || *latency < 0:
			return usageError(stderr, "demo", "--slow-at, --slow-for, --slow-latency and --provider-latency must not be negative")
		case *attemptTO <= 0:
			return usageError(stderr, "demo", "--attempt-timeout must be positive")
		case *retries < 0:
			return usageError(stderr, "demo", "--retries must not be negative")
		}
		n := *retries
		if n == 0 {
			n = -1
		}
		code, _ := stormDemo(ctx, stormDemoConfig{rate: *rate, duration: *duration, latency: *latency, slowAt: *slowAt,
			slowFor: *slowFor, slowLatency: *slowLatency, attemptTimeout: *attemptTO, retries: n, report: *report}, stdout, stderr)
		return code
	}
	switch {
	case fs.NArg() > 0:
		return usageError(stderr, "demo", "unexpected argument %q", fs.Arg(0))
	case *keys < 1 || *dups < 1 || *conc < 1:
		return usageError(stderr, "demo", "--keys, --dups and --concurrency must be at least 1")
	case *keys > 100_000:
		return usageError(stderr, "demo", "--keys must be at most 100000")
	case *latency < 0:
		return usageError(stderr, "demo", "--provider-latency must not be negative")
	case *drop < 0 || *unavail < 0 || *drop+*unavail >= 1:
		return usageError(stderr, "demo", "--drop and --unavailable must not be negative, and their sum below 1")
	}
	if *flaky {
		return flakyDemo(ctx, flakyConfig{payments: *keys, concurrency: *conc, latency: *latency, drop: *drop, unavailable: *unavail, seed: *seed}, stdout, stderr)
	}

	// Duplicates wait for the first attempt and get its answer, so the
	// storm ends with an answer for every request, not a pile of 409s.
	d, err := startDemo(demoSetup{latency: *latency, stderr: stderr, wait: 5 * time.Second})
	if err != nil {
		fmt.Fprintf(stderr, "idemkey demo: %v\n", err)
		return 1
	}
	defer d.close()
	api := d.api

	base := d.base
	url := base + "/v1/payments"
	fmt.Fprintf(stdout, "idemkey demo: the payments API (examples/payments) on embedded Redis, at %s\n", url)
	fmt.Fprintf(stdout, "retry storm: %d payments, each sent %d times at once under one Idempotency-Key; provider latency %s\n\n",
		*keys, *dups, *latency)

	rep, err := storm.Run(ctx, storm.Config{
		URL:         url,
		Header:      http.Header{"Authorization": {"Bearer demo-merchant"}},
		BodyFor:     demoPayment,
		Keys:        *keys,
		Dups:        *dups,
		Concurrency: *conc,
		Retry:       true,
		Timeout:     30 * time.Second,
		KeyPrefix:   "demo-",
		// The API's own count of provider charges must grow by exactly
		// one per key: the storm checks the side effect, not only the
		// answers.
		CountURL:   base + "/v1/stats",
		CountField: "provider_charges",
	})
	if rep == nil {
		fmt.Fprintf(stderr, "idemkey demo: %v\n", err)
		return 2
	}
	if err := rep.WriteText(stdout); err != nil {
		fmt.Fprintf(stderr, "idemkey demo: %v\n", err)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "idemkey demo: storm interrupted: %v\n", err)
		return 1
	}

	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := api.Stats(sctx)
	if err != nil {
		fmt.Fprintf(stderr, "idemkey demo: reading the side effects: %v\n", err)
		return 1
	}
	want := int64(*keys)
	fmt.Fprintf(stdout, "\nside effects, read back from Redis:\n")
	fmt.Fprintf(stdout, "  %-22s %d\n", "payments asked for", want)
	fmt.Fprintf(stdout, "  %-22s %d\n", "payments created", st.PaymentsCreated)
	fmt.Fprintf(stdout, "  %-22s %d\n", "provider charges", st.ProviderCharges)
	fmt.Fprintf(stdout, "  %-22s %d\n", "provider deduplicated", st.ProviderDeduplicated)

	var problems []string
	if v := rep.Verdict(); v != storm.VerdictPass {
		problems = append(problems, "the storm's verdict is "+v)
	}
	if st.PaymentsCreated != want || st.ProviderCharges != want {
		problems = append(problems, fmt.Sprintf("%d payments and %d charges for %d keys", st.PaymentsCreated, st.ProviderCharges, want))
	}
	if len(problems) > 0 {
		fmt.Fprintf(stdout, "\nexactly once: FAIL (%s)\n", strings.Join(problems, "; "))
		return 1
	}
	fmt.Fprintf(stdout, "\nexactly once: PASS (%d requests, %d payments, %d charges)\n", rep.Requests, st.PaymentsCreated, st.ProviderCharges)
	return 0
}

// demoPayment is the body of the i-th payment of the storm: every key its
// own amount, currency and customer.
func demoPayment(_ string, i int) []byte {
	currencies := [...]string{"EUR", "USD", "GBP", "JPY"}
	return fmt.Appendf(nil, `{"amount": %d, "currency": %q, "customer": "cus_%04d"}`,
		500+(i*137)%9500, currencies[i%len(currencies)], i)
}

// demoServer is the payments API on embedded Redis, served on loopback.
type demoServer struct {
	api   *payments.API
	base  string // http://127.0.0.1:port
	close func()
}

// demoSetup is how startDemo serves the payments API.
type demoSetup struct {
	latency time.Duration // the provider's
	faults  bool          // the API's fault drills (payments.Config.Faults)
	wait    time.Duration // how long duplicates wait for the first attempt (ginmw Options.Wait)
	stderr  io.Writer     // for the API's warnings
	// wrap, if set, stands between the network and the API.
	wrap func(http.Handler) http.Handler
	// redisHook, if set, sees the embedded Redis's commands.
	redisHook redis.Hook
}

// startDemo serves the payments API on embedded Redis, as s says.
func startDemo(s demoSetup) (*demoServer, error) {
	latency, faults, stderr, wrap := s.latency, s.faults, s.stderr, s.wrap
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	mr, rdb, err := embedded()
	if err != nil {
		return nil, err
	}
	if s.redisHook != nil {
		rdb.AddHook(s.redisHook)
	}
	fail := func(err error) (*demoServer, error) {
		_ = rdb.Close()
		mr.Close()
		return nil, err
	}
	sc, err := storeClient(rdb, false)
	if err != nil {
		return fail(err)
	}
	// The embedded miniredis neither evicts nor persists: nothing for the
	// start-up check to warn about.
	store, err := redisstore.New(sc, redisstore.Options{NoStartupCheck: true})
	if err != nil {
		return fail(err)
	}
	api, err := payments.New(payments.Config{
		Redis:           rdb,
		Store:           store,
		Idempotency:     ginmw.Options{Wait: s.wait, Logger: logger},
		ProviderLatency: latency,
		Faults:          faults,
		Logger:          logger,
	})
	if err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	var h http.Handler = api
	if wrap != nil {
		h = wrap(api)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return &demoServer{api: api, base: "http://" + ln.Addr().String(), close: func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		_ = rdb.Close()
		mr.Close()
	}}, nil
}
