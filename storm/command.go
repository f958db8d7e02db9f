package storm

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/idemkey/idemkey/idemclient"
	"github.com/idemkey/idemkey/internal/httpflag"
)

const usageText = `Usage: idemkey storm --url URL [flags]

Sends --dups identical requests for each of --keys fresh idempotency keys,
concurrently, so that the duplicates of every key overlap in time. When every
request has ended, it sends one more duplicate on a fresh connection for each
key with a final answer: the late probe (--no-probe skips it). Every attempt
is recorded (--history FILE writes them as JSON Lines, for 'idemkey check'),
and the verdict is a check over that record, key by key, by named rules:

  at-most-once       two executions fail; an execution after an attempt whose
                     answer was lost (a timeout, a transport error), which may
                     have run too, is unproven: inconclusive, unless a count
                     decides it
  retries-not-final  a 5xx, 408, 425, 429 or 503 that storm retried is neither
                     an execution nor a final answer (a 5xx never is: idemkey
                     releases the key, and the retry runs it)
  one-answer         every final answer has the same status and body
  no-lost-success    the late probe gets an identical replay
  liveness           a key without a final answer is inconclusive

The verdict is fail when a key failed or a count grew by another number than
the keys allow, inconclusive when a key is inconclusive (or the run was
interrupted, or a count unreadable), pass otherwise.

--count-url URL --count-field NAME[=N] (repeatable) reads side-effect counts
before and after (--settle after the last attempt, when one lost its answer): each must grow by N (default 1) per key whose final answer
was a 2xx or 3xx, plus at most N per other key sent (a 4xx, or no final
answer); exactly that proves the unproven keys ran once.

In -H values and in the body, {n} stands for the key's index (0 to keys-1)
and {key} for the key itself, e.g. -H 'X-User: user-{n}'.

Load mode, when --rate or --duration is given: --rate operations start every
second for --duration, on a fixed schedule that does not wait for the server.
Each operation has a key of its own and is sent --dups times at once (default
1); every copy gives up on an attempt after --attempt-timeout and retries with
the same key and body, up to --retries times, as idemclient does (409, 429,
500, 502, 503, 504 and network errors, after Retry-After or an exponential
backoff with full jitter between the two --backoff bounds), within --timeout
for the whole operation. At most --max-in-flight attempts are in flight: an
operation that has to wait for a slot is late, and every latency counts from
the scheduled start (an operation that never started counts the whole
--timeout). The report adds operations, attempts, amplification (attempts per
operation, and its peak second), goodput (operations completed per second)
and exactly-once goodput, latency percentiles and a per-second timeline;
--report writes it as one HTML file. --max-p99, --max-amplification,
--max-peak-amplification, --min-goodput and --min-exactly-once-goodput are
thresholds: a broken one makes the exit status 1 whatever the verdict.
--stages D:R[,D:R...] shapes the arrivals as k6's ramping-arrival-rate does:
the rate moves linearly to R over each stage's D, from --rate (0 by default
then), and the run lasts the sum of the stages; each second of the timeline
has the operations "scheduled" in it beside those "started". --csv FILE
writes the timeline as CSV, one row per second; --metrics-addr ADDR
(loopback) serves the live figures at /metrics in the Prometheus text format
while the storm runs, every name starting with idemkey_storm_.
--keys, --concurrency and --retry are the burst mode's.

An incident, reproduced: --proxy NAME=LISTEN,UPSTREAM (--tcp-proxy
NAME=LISTEN,ADDR) runs a fault hop on a loopback address that the service
calls its dependency through; --fault 'NAME at=D for=D [latency=D[..D]]
[errors=P%[:STATUS]] [down]' disturbs it for a window of the run, and
--at D=COMMAND runs a shell command at a time of it (its exit status and
duration recorded). In load mode, --retry-policy P[,P...] picks the clients'
retry policy (backoff, naive, budget, token-bucket, adaptive; idemclient's):
several run as arms, one after the other, on the same schedule and fresh
keys, and the report sets them side by side (--history FILE then writes
FILE.POLICY per arm, the policy before the extension). With a fault or an
event, the report measures the recovery: the baseline (goodput, p99) before
the first trigger, and the time after the last one ends until goodput is at
least 95% of it and p99 under twice it for 3 seconds in a row; a run that
does not recover by the end of its schedule is metastable. --max-recovery is
a threshold on it.

Exit status: 0 pass (and no threshold broken), 1 fail, inconclusive or a
broken threshold, 2 usage error or not a single HTTP response.

Flags:
`

// Command runs "idemkey storm" with args (the arguments after "storm"),
// writing the report to stdout and diagnostics to stderr, and returns the
// process exit code: 0 pass, 1 fail or inconclusive, 2 usage error or not a
// single HTTP response (see the package documentation). It prints the usage
// and returns 0 for -h. A progress line is written to stderr only when
// stderr is an *os.File connected to a terminal.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("storm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	var (
		headers    httpflag.Headers
		retry      bool
		target     = fs.String("url", "", "target `URL` (required)")
		method     = fs.String("method", http.MethodPost, "HTTP `method`")
		body       = fs.String("body", "", "request body, e.g. a JSON document (Content-Type defaults to application/json); {n} and {key} are replaced")
		file       = fs.String("body-file", "", "read the request body from `file`; {n} and {key} are replaced")
		keyHeader  = fs.String("key-header", headerIdempotencyKey, "the request `header` that carries the idempotency key")
		keys       = fs.Int("keys", defaultKeys, "number of distinct idempotency keys")
		dups       = fs.Int("dups", defaultDups, "identical requests per key, sent at once (load mode: copies of each operation, default 1)")
		conc       = fs.Int("concurrency", defaultConcurrency, "concurrent workers")
		timeout    = fs.Duration("timeout", defaultTimeout, "timeout of each request, its retries included")
		noProbe    = fs.Bool("no-probe", false, "skip the late probe (one more duplicate per key after the storm, which must be an identical replay)")
		countURL   = fs.String("count-url", "", "read side-effect counts (--count-field) from this JSON `URL` before and after the storm")
		countField countFlag
		history    = fs.String("history", "", "write every attempt to `file` as JSON Lines, streamed, for 'idemkey check'")
		settle     = fs.Duration("settle", 0, "with --count-url: wait this long after the last attempt before reading the counts, when an attempt lost its answer, so that executions still running behind client timeouts are counted (default: the attempt timeout, --attempt-timeout or --timeout; 0 for none)")
		asJSON     = fs.Bool("json", false, "print the report as one JSON object")
	)
	var (
		rate        = fs.Float64("rate", 0, "load mode: operations started per `second`, on a fixed schedule (default 100 with --duration; with --stages, the rate they start from, default 0)")
		duration    = fs.Duration("duration", 0, "load mode: how long operations are scheduled (default 10s with --rate)")
		maxInFlight = fs.Int("max-in-flight", defaultMaxInFlight, "load mode: attempts in flight at most; an operation that waits for a slot is late")
		attemptTO   = fs.Duration("attempt-timeout", 0, "load mode: give up on one attempt after this long and retry it with the same key (default: none but --timeout)")
		retries     = fs.Int("retries", defaultRetries, "load mode: retries of each copy of an operation")
		backoff     = fs.String("backoff", "100ms,10s", "load mode: `MIN,MAX` of the exponential backoff with full jitter, for an answer without Retry-After (which is honoured up to 30s)")
		reportFile  = fs.String("report", "", "load mode: write the report as one self-contained HTML `file`")
		maxP99      = fs.Duration("max-p99", 0, "load mode threshold: the operations' p99 latency at most this")
		maxAmp      = fs.Float64("max-amplification", 0, "load mode threshold: attempts per operation at most this")
		minGoodput  = fs.Float64("min-goodput", 0, "load mode threshold: operations completed per second at least this")
		minEOGood   = fs.Float64("min-exactly-once-goodput", 0, "load mode threshold: operations completed per second whose key passed, at least this")
		maxPeakAmp  = fs.Float64("max-peak-amplification", 0, "load mode threshold: the highest amplification of one second at most this")
		stages      = fs.String("stages", "", "load mode: ramp the arrival rate linearly to R over each stage `D:R[,D:R…]`, from --rate (default 0 with --stages); the run lasts their sum, e.g. 10s:100,30s:100,5s:0")
		csvFile     = fs.String("csv", "", "load mode: write the timeline as CSV to `file`, one row per second (see storm/README.md)")
		metricsAddr = fs.String("metrics-addr", "", "load mode: serve the live figures at http://`ADDR`/metrics in the Prometheus text format while the storm runs (loopback only, e.g. 127.0.0.1:9464)")
	)
	fs.Var(&countField, "count-field", "a count's member `NAME[=N]` in the --count-url JSON object (dots reach into nested objects), N the side effects each operation makes on it (default 1; 0 for none); repeatable")
	const retryUsage = "retry 409, 408, 425, 429, 500, 502, 503, 504 and transport errors with the same key after Retry-After, until a final answer or --timeout"
	fs.BoolVar(&retry, "retry", false, retryUsage)
	fs.BoolVar(&retry, "retry-409", false, "the same as --retry")
	fs.Var(&headers, "H", "extra request `header` \"Name: value\" (repeatable); {n} and {key} are replaced")
	inc := incidentFlags(fs)

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2 // the flag package has printed the error and usage
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "idemkey storm: %s\n", fmt.Sprintf(format, a...))
		fmt.Fprintln(stderr, "Run 'idemkey storm -h' for usage.")
		return 2
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if _, err := httpflag.ParseURL(*target); err != nil {
		return usageErr("--url: %v", err)
	}
	if !httpflag.IsToken(*method) {
		return usageErr("--method: invalid method %q", *method)
	}
	if !httpflag.IsToken(*keyHeader) {
		return usageErr("--key-header: invalid header name %q", *keyHeader)
	}
	if _, ok := headers.Header[http.CanonicalHeaderKey(*keyHeader)]; ok {
		return usageErr("-H: %s is generated by the storm and cannot be set", http.CanonicalHeaderKey(*keyHeader))
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"keys", *keys}, {"dups", *dups}, {"concurrency", *conc}} {
		if c.v < 1 {
			return usageErr("--%s must be at least 1, got %d", c.name, c.v)
		}
	}
	loadMode := set["rate"] || set["duration"] || set["stages"]
	if loadMode {
		for _, name := range []string{"keys", "concurrency", "retry", "retry-409"} {
			if set[name] {
				return usageErr("--%s is the burst mode's; load mode (--rate, --duration) schedules --rate x --duration operations", name)
			}
		}
	} else {
		for _, name := range []string{"max-in-flight", "attempt-timeout", "retries", "backoff", "report", "max-p99", "max-amplification",
			"min-goodput", "min-exactly-once-goodput", "max-peak-amplification", "retry-policy", "max-recovery"} {
			if set[name] {
				return usageErr("--%s needs load mode: give --rate or --duration", name)
			}
		}
	}
	for _, name := range []string{"csv", "metrics-addr"} {
		if set[name] && !loadMode {
			return usageErr("--%s needs load mode: give --rate, --duration or --stages", name)
		}
	}
	if int64(*keys)*int64(*dups) > maxRequests {
		return usageErr("--keys x --dups must not exceed %d", maxRequests)
	}
	if *timeout <= 0 {
		return usageErr("--timeout must be positive, got %s", *timeout)
	}
	if set["body"] && set["body-file"] {
		return usageErr("--body and --body-file are mutually exclusive")
	}
	if (*countURL == "") != (len(countField) == 0) {
		return usageErr("--count-url and --count-field go together")
	}
	if set["settle"] && *countURL == "" {
		return usageErr("--settle needs --count-url: it is the wait before the counts are read")
	}
	if *settle < 0 {
		return usageErr("--settle must not be negative, got %s", *settle)
	}
	if *countURL != "" {
		if _, err := httpflag.ParseURL(*countURL); err != nil {
			return usageErr("--count-url: %v", err)
		}
	}
	payload := []byte(*body)
	if set["body-file"] {
		b, err := os.ReadFile(*file)
		if err != nil {
			return usageErr("--body-file: %v", err)
		}
		payload = b
	}

	cfg := Config{
		URL:         *target,
		Method:      *method,
		KeyHeader:   *keyHeader,
		Keys:        *keys,
		Dups:        *dups,
		Concurrency: *conc,
		Timeout:     *timeout,
		Retry:       retry,
		NoProbe:     *noProbe,
		CountURL:    *countURL,
		Counts:      countField,
		Settle:      *settle,
	}
	if set["settle"] && *settle == 0 {
		cfg.Settle = -1 // none
	}
	if loadMode {
		switch {
		case set["rate"] && !set["stages"] && !(*rate > 0) || math.IsInf(*rate, 0):
			return usageErr("--rate must be a positive number, got %v", *rate)
		case set["stages"] && (!(*rate >= 0) || math.IsInf(*rate, 0)):
			return usageErr("--rate must be a number of 0 or more with --stages, got %v", *rate)
		case set["stages"] && set["duration"]:
			return usageErr("--stages and --duration are mutually exclusive: the run lasts the sum of the stages")
		case set["duration"] && *duration <= 0:
			return usageErr("--duration must be positive, got %s", *duration)
		case *maxInFlight < 1:
			return usageErr("--max-in-flight must be at least 1, got %d", *maxInFlight)
		case *attemptTO < 0:
			return usageErr("--attempt-timeout must not be negative, got %s", *attemptTO)
		case *retries < 0:
			return usageErr("--retries must not be negative, got %d", *retries)
		case *maxP99 < 0 || *maxAmp < 0 || *minGoodput < 0 || *minEOGood < 0 || *maxPeakAmp < 0 || math.IsNaN(*maxAmp) ||
			math.IsNaN(*minGoodput) || math.IsNaN(*minEOGood) || math.IsNaN(*maxPeakAmp):
			return usageErr("the thresholds (--max-p99, --max-amplification, --min-goodput, --min-exactly-once-goodput, --max-peak-amplification) must not be negative")
		}
		lo, hi, err := parseBackoff(*backoff)
		if err != nil {
			return usageErr("--backoff: %v", err)
		}
		cfg.Rate, cfg.Duration, cfg.MaxInFlight, cfg.AttemptTimeout = *rate, *duration, *maxInFlight, *attemptTO
		if set["stages"] {
			st, err := ParseStages(*stages)
			if err != nil {
				return usageErr("--stages: %v", err)
			}
			cfg.Stages = st
		}
		if *metricsAddr != "" {
			if _, err := checkMetricsAddr(*metricsAddr); err != nil {
				return usageErr("--metrics-addr: %v", err)
			}
			cfg.Metrics = NewMetrics()
		}
		cfg.Retries = *retries
		if cfg.Retries == 0 {
			cfg.Retries = -1
		}
		cfg.Policy = idemclient.Policy{BaseDelay: lo, MaxDelay: hi}
		cfg.MaxP99, cfg.MaxAmplification, cfg.MinGoodput = *maxP99, *maxAmp, *minGoodput
		cfg.MinExactlyOnceGoodput, cfg.MaxPeakAmplification = *minEOGood, *maxPeakAmp
		if !set["dups"] {
			cfg.Dups = 1
		}
		if _, _, err := normalize(cfg); err != nil {
			return usageErr("%v", err)
		}
	}
	cfg.Body, cfg.BodyFor = bodyTemplate(payload)
	cfg.Header, cfg.HeaderFor = headerTemplate(headers.Header)
	if isTerminal(stderr) {
		cfg.Progress = stderr
	}
	inc.apply(&cfg)
	if ncfg, _, err := normalize(cfg); err != nil {
		return usageErr("%v", err)
	} else if _, err := parseIncident(ncfg); err != nil {
		return usageErr("%s", strings.TrimPrefix(err.Error(), ErrInvalidConfig.Error()+": "))
	}
	if len(cfg.RetryPolicies) > 1 && *history != "" {
		files, err := armHistories(*history, cfg.RetryPolicies)
		if err != nil {
			return usageErr("--history: %v", err)
		}
		defer files.close()
		cfg.HistoryFor = files.writer
		*history = ""
	}
	if cfg.Metrics != nil {
		stop, err := serveMetrics(*metricsAddr, cfg.Metrics, stderr)
		if err != nil {
			return usageErr("--metrics-addr: %v", err)
		}
		defer stop()
	}
	var historyFile *os.File
	if *history != "" {
		f, err := os.Create(*history)
		if err != nil {
			return usageErr("--history: %v", err)
		}
		historyFile, cfg.History = f, f
	}
	rep, err := Run(ctx, cfg)
	if historyFile != nil {
		if cerr := historyFile.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("%w: %v", ErrHistory, cerr)
		}
		if rep == nil {
			_ = os.Remove(*history) // nothing was sent: no history
		}
	}
	if rep == nil {
		if errors.Is(err, ErrCount) {
			fmt.Fprintf(stderr, "idemkey storm: --count-url: %v\n", err)
			return 2
		}
		return usageErr("%v", err)
	}
	historyErr := errors.Is(err, ErrHistory)
	switch {
	case historyErr:
		fmt.Fprintf(stderr, "idemkey storm: --history: %v\n", err)
	case err != nil:
		fmt.Fprintf(stderr, "idemkey storm: interrupted after %s: %v\n", rep.Elapsed.Round(time.Millisecond), err)
	}
	if rep.Error != "" {
		fmt.Fprintf(stderr, "idemkey storm: %s\n", rep.Error)
	}
	if *asJSON {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "idemkey storm: writing report: %v\n", err)
		return 2
	}
	if *reportFile != "" {
		if err := rep.WriteHTMLFile(*reportFile); err != nil {
			fmt.Fprintf(stderr, "idemkey storm: --report: %v\n", err)
			return 2
		}
	}
	if *csvFile != "" {
		if err := rep.writeCSVFile(*csvFile); err != nil {
			fmt.Fprintf(stderr, "idemkey storm: --csv: %v\n", err)
			return 2
		}
	}
	if historyErr {
		return 2
	}
	return rep.ExitCode()
}

// countFlag is --count-field: NAME[=N], repeatable.
type countFlag []CountSpec

func (f *countFlag) String() string {
	var parts []string
	for _, c := range *f {
		parts = append(parts, fmt.Sprintf("%s=%d", c.Field, c.Want))
	}
	return strings.Join(parts, ",")
}

func (f *countFlag) Set(s string) error {
	name, n, hasN := strings.Cut(s, "=")
	c := CountSpec{Field: strings.TrimSpace(name), Want: 1}
	if c.Field == "" {
		return errors.New("want NAME or NAME=N")
	}
	if hasN {
		want, err := strconv.Atoi(strings.TrimSpace(n))
		if err != nil || want < 0 {
			return fmt.Errorf("%q: want N, a whole number of side effects per operation, 0 or more", n)
		}
		c.Want = want
	}
	for _, prev := range *f {
		if prev.Field == c.Field {
			return fmt.Errorf("%s given twice", c.Field)
		}
	}
	*f = append(*f, c)
	return nil
}

// parseBackoff parses --backoff's "MIN,MAX".
func parseBackoff(s string) (lo, hi time.Duration, err error) {
	a, b, ok := strings.Cut(s, ",")
	if !ok {
		return 0, 0, fmt.Errorf("want MIN,MAX (e.g. 100ms,10s), got %q", s)
	}
	if lo, err = time.ParseDuration(strings.TrimSpace(a)); err != nil {
		return 0, 0, err
	}
	if hi, err = time.ParseDuration(strings.TrimSpace(b)); err != nil {
		return 0, 0, err
	}
	if lo <= 0 || hi < lo {
		return 0, 0, fmt.Errorf("want 0 < MIN <= MAX, got %q", s)
	}
	return lo, hi, nil
}

// isTerminal reports whether w is an *os.File connected to a terminal (not
// merely a character device such as /dev/null).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isatty.IsTerminal(f.Fd())
}
