package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/idemclient"
	"github.com/idemkey/idemkey/storm"
)

// stormDemoConfig is what "idemkey demo --storm" runs.
type stormDemoConfig struct {
	rate           float64
	duration       time.Duration
	latency        time.Duration // the provider's, outside the slow window
	slowAt         time.Duration // the slow window's start, from the run's
	slowFor        time.Duration
	slowLatency    time.Duration // the provider's, inside it
	attemptTimeout time.Duration
	retries        int
	report         string // --report FILE
}

// slowProvider delays the provider's charge calls (the payments API's
// Redis script on "{provider}:charge:" keys) while the window is open: a
// dependency that slows down for a while. Everything else passes.
type slowProvider struct {
	delay atomic.Int64 // nanoseconds; 0 outside the window
	calls atomic.Int64 // charge calls slowed
}

var _ redis.Hook = (*slowProvider)(nil)

func (p *slowProvider) DialHook(next redis.DialHook) redis.DialHook { return next }

func (p *slowProvider) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (p *slowProvider) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if d := time.Duration(p.delay.Load()); d > 0 && isCharge(cmd) {
			p.calls.Add(1)
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}

// isCharge reports whether cmd runs the provider's charge script.
func isCharge(cmd redis.Cmder) bool {
	name := cmd.Name()
	if name != "evalsha" && name != "eval" {
		return false
	}
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.Contains(s, "{provider}:charge:") {
			return true
		}
	}
	return false
}

// stormDemo runs a load-mode retry storm at the payments API on embedded
// Redis while its provider is slow for a while, and checks that every
// payment was charged once. It returns the exit code and the storm's
// report (nil if it did not run).
func stormDemo(ctx context.Context, cfg stormDemoConfig, stdout, stderr io.Writer) (int, *storm.Report) {
	slow := &slowProvider{}
	d, err := startDemo(demoSetup{latency: cfg.latency, stderr: stderr, redisHook: slow})
	if err != nil {
		fmt.Fprintf(stderr, "idemkey demo: %v\n", err)
		return 1, nil
	}
	defer d.close()

	url := d.base + "/v1/payments"
	fmt.Fprintf(stdout, "idemkey demo --storm: the payments API (examples/payments) on embedded Redis, at %s\n", url)
	fmt.Fprintf(stdout, "%s payments/s for %s, each its own key; clients give up on an attempt after %s and retry with the same key;\n",
		strings.TrimSuffix(fmt.Sprintf("%.1f", cfg.rate), ".0"), cfg.duration, cfg.attemptTimeout)
	fmt.Fprintf(stdout, "the provider answers in %s, but in %s from %s on\n\n", cfg.latency, cfg.slowLatency, cfg.slowAt)

	// The slow window, on the storm's clock: it starts when the storm does.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := make(chan struct{})
	go func() {
		<-started
		select {
		case <-time.After(cfg.slowAt):
			slow.delay.Store(int64(cfg.slowLatency))
		case <-runCtx.Done():
			return
		}
		select {
		case <-time.After(cfg.slowFor):
		case <-runCtx.Done():
		}
		slow.delay.Store(0)
	}()

	rep, err := storm.Run(runCtx, storm.Config{
		URL:            url,
		Header:         http.Header{"Authorization": {"Bearer demo-merchant"}},
		BodyFor:        demoPayment,
		Rate:           cfg.rate,
		Duration:       cfg.duration,
		AttemptTimeout: cfg.attemptTimeout,
		Timeout:        30 * time.Second,
		Retries:        cfg.retries,
		Policy:         idemclient.Policy{BaseDelay: 50 * time.Millisecond, MaxDelay: time.Second},
		KeyPrefix:      "demo-",
		CountURL:       d.base + "/v1/stats",
		CountField:     "provider_charges",
		OnStart:        func() { close(started) },
	})
	if code := writeDemoStorm(rep, err, false, cfg.report, stdout, stdout, stderr); code != 0 {
		return code, rep
	}

	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	st, err := d.api.Stats(sctx)
	if err != nil {
		fmt.Fprintf(stderr, "idemkey demo: reading the side effects: %v\n", err)
		return 1, rep
	}
	want := int64(rep.Load.Operations.Started)
	fmt.Fprintf(stdout, "\nside effects, read back from Redis:\n")
	fmt.Fprintf(stdout, "  %-22s %d\n", "payments asked for", want)
	fmt.Fprintf(stdout, "  %-22s %d\n", "payments created", st.PaymentsCreated)
	fmt.Fprintf(stdout, "  %-22s %d\n", "provider charges", st.ProviderCharges)
	fmt.Fprintf(stdout, "  %-22s %d\n", "provider deduplicated", st.ProviderDeduplicated)
	fmt.Fprintf(stdout, "  %-22s %d\n", "charges slowed", slow.calls.Load())

	peak, at := rep.Load.PeakAmplification, rep.Load.PeakSecond
	var problems []string
	if v := rep.Verdict(); v != storm.VerdictPass {
		problems = append(problems, "the storm's verdict is "+v)
	}
	if st.PaymentsCreated != want || st.ProviderCharges != want {
		problems = append(problems, fmt.Sprintf("%d payments and %d charges for %d payments sent", st.PaymentsCreated, st.ProviderCharges, want))
	}
	if len(problems) > 0 {
		fmt.Fprintf(stdout, "\nexactly once: FAIL (%s)\n", strings.Join(problems, "; "))
		return 1, rep
	}
	fmt.Fprintf(stdout, "\nexactly once: PASS (%d payments, %d charges; %d attempts, amplification %.2f overall, peak %.2f in second %d)\n",
		st.PaymentsCreated, st.ProviderCharges, rep.Load.Attempts, rep.Load.Amplification, peak, at)
	return 0, rep
}

// writeDemoStorm ends a demo's storm: a usage error (2) when it could not
// start, else its report, as JSON or text on stdout, the HTML to report
// (its path said on out) when asked, and 1 when writing failed or the
// storm was interrupted; 0 when all went out.
func writeDemoStorm(rep *storm.Report, err error, asJSON bool, report string, stdout, out, stderr io.Writer) int {
	if rep == nil {
		fmt.Fprintf(stderr, "idemkey demo: %v\n", err)
		return 2
	}
	write := rep.WriteText
	if asJSON {
		write = rep.WriteJSON
	}
	if werr := write(stdout); werr != nil {
		fmt.Fprintf(stderr, "idemkey demo: %v\n", werr)
		return 1
	}
	if report != "" {
		if werr := rep.WriteHTMLFile(report); werr != nil {
			fmt.Fprintf(stderr, "idemkey demo: --report: %v\n", werr)
			return 1
		}
		fmt.Fprintf(out, "\nreport: %s\n", report)
	}
	if err != nil {
		fmt.Fprintf(stderr, "idemkey demo: storm interrupted: %v\n", err)
		return 1
	}
	return 0
}
