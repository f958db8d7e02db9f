package storm

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

const usageText = `Usage: idemkey storm --url URL [flags]

Sends --dups identical requests for each of --keys fresh idempotency keys,
concurrently, so that the duplicates of every key overlap in time. When every
request has ended, it sends one more duplicate on a fresh connection for each
key that passed so far: the late probe (--no-probe skips it). Then it
classifies every key:

  passed        at most one execution, every final answer identical (status
                and body), and the probe got an identical replay
  failed        more than one execution (a 5xx other than 503 counts as one),
                final answers that differ, or a probe that is not an
                identical replay
  inconclusive  no final answer: only 409, 408, 425, 429, 503 or transport
                errors, in the storm or in the probe

The verdict is pass when every key passed (and, with --count-url, the count
grew by exactly the number of keys that passed), fail when a key failed or
the count grew by another number, inconclusive otherwise.

In -H values and in the body, {n} stands for the key's index (0 to keys-1)
and {key} for the key itself, e.g. -H 'X-User: user-{n}'.

Exit status: 0 pass, 1 fail or inconclusive, 2 usage error or not a single
HTTP response.

Flags:
`

// headerFlag is a repeatable "Name: value" flag.
type headerFlag struct {
	h http.Header
}

func (f *headerFlag) String() string {
	if f == nil || len(f.h) == 0 {
		return ""
	}
	var parts []string
	for name, values := range f.h {
		for _, v := range values {
			parts = append(parts, name+": "+v)
		}
	}
	return strings.Join(parts, ", ")
}

func (f *headerFlag) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	if !ok {
		return fmt.Errorf("want \"Name: value\", got %q", s)
	}
	name = strings.TrimSpace(name)
	if !isToken(name) {
		return fmt.Errorf("invalid header name %q", name)
	}
	value = strings.TrimSpace(value)
	if strings.ContainsAny(value, "\r\n\x00") {
		return fmt.Errorf("invalid value for header %s", name)
	}
	if f.h == nil {
		f.h = http.Header{}
	}
	f.h.Add(name, value)
	return nil
}

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
		headers    headerFlag
		retry      bool
		target     = fs.String("url", "", "target `URL` (required)")
		method     = fs.String("method", http.MethodPost, "HTTP `method`")
		body       = fs.String("body", "", "request body, e.g. a JSON document (Content-Type defaults to application/json); {n} and {key} are replaced")
		file       = fs.String("body-file", "", "read the request body from `file`; {n} and {key} are replaced")
		keyHeader  = fs.String("key-header", headerIdempotencyKey, "the request `header` that carries the idempotency key")
		keys       = fs.Int("keys", defaultKeys, "number of distinct idempotency keys")
		dups       = fs.Int("dups", defaultDups, "identical requests per key")
		conc       = fs.Int("concurrency", defaultConcurrency, "concurrent workers")
		timeout    = fs.Duration("timeout", defaultTimeout, "timeout of each request, its retries included")
		noProbe    = fs.Bool("no-probe", false, "skip the late probe (one more duplicate per key after the storm, which must be an identical replay)")
		countURL   = fs.String("count-url", "", "read a side-effect count from this JSON `URL` before and after the storm; it must grow by the number of keys that passed")
		countField = fs.String("count-field", "", "the count's member `name` in the --count-url JSON object (dots reach into nested objects)")
		asJSON     = fs.Bool("json", false, "print the report as one JSON object")
	)
	const retryUsage = "retry 409, 408, 425, 429, 503 and transport errors with the same key after Retry-After, until a final answer or --timeout"
	fs.BoolVar(&retry, "retry", false, retryUsage)
	fs.BoolVar(&retry, "retry-409", false, "the same as --retry")
	fs.Var(&headers, "H", "extra request `header` \"Name: value\" (repeatable); {n} and {key} are replaced")

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
	if _, err := parseURL(*target); err != nil {
		return usageErr("--url: %v", err)
	}
	if !isToken(*method) {
		return usageErr("--method: invalid method %q", *method)
	}
	if !isToken(*keyHeader) {
		return usageErr("--key-header: invalid header name %q", *keyHeader)
	}
	if _, ok := headers.h[http.CanonicalHeaderKey(*keyHeader)]; ok {
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
	if int64(*keys)*int64(*dups) > maxRequests {
		return usageErr("--keys x --dups must not exceed %d", maxRequests)
	}
	if *timeout <= 0 {
		return usageErr("--timeout must be positive, got %s", *timeout)
	}
	if set["body"] && set["body-file"] {
		return usageErr("--body and --body-file are mutually exclusive")
	}
	if (*countURL == "") != (*countField == "") {
		return usageErr("--count-url and --count-field go together")
	}
	if *countURL != "" {
		if _, err := parseURL(*countURL); err != nil {
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
		CountField:  *countField,
	}
	cfg.Body, cfg.BodyFor = bodyTemplate(payload)
	cfg.Header, cfg.HeaderFor = headerTemplate(headers.h)
	if isTerminal(stderr) {
		cfg.Progress = stderr
	}
	rep, err := Run(ctx, cfg)
	if rep == nil {
		if errors.Is(err, ErrCount) {
			fmt.Fprintf(stderr, "idemkey storm: --count-url: %v\n", err)
			return 2
		}
		return usageErr("%v", err)
	}
	if err != nil {
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
	return rep.ExitCode()
}

// isTerminal reports whether w is an *os.File connected to a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
