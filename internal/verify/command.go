package verify

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"

	"github.com/idemkey/idemkey/idemclient"
	"github.com/idemkey/idemkey/internal/httpflag"
)

const about = `Runs the idempotency verification list against one endpoint and says, check
by check, which clauses of the contract hold. Each check prints ok or FAIL
with its evidence:

  missing key     the request without the key header gets 400
                  (--optional-key skips it: nothing is sent)
  malformed key   a 300-character key and a key with a control character
                  (a tab, the one control character HTTP lets through to
                  the application) each get 400
  concurrency     --parallel copies of one keyed request at once: exactly
                  one original; the rest are replays (Idempotent-Replayed:
                  true) or 409s with Retry-After; every final answer
                  identical (status and body); 409s are retried after
                  Retry-After until final, within --timeout
  replay          the same request once more: identical status, body and
                  Location, marked Idempotent-Replayed: true
  mismatch        the same key with another body (--alt-body, else --body
                  with one JSON value changed) gets 422 and changes
                  nothing: the original request still replays the
                  original outcome (and the count, if given, does not move)
  side effects    with --count-url and --count-field: the counter rises by
                  exactly one run's (--side-effects-per-run, 1) across the
                  checks above
  lost response   with --fault-header: the first attempt of a fresh key
                  carries that header (e.g. 'X-Demo-Fault: drop-response'
                  for 'idemkey serve --faults'), which must lose the answer;
                  the retry without it gets the replay, and the count, if
                  given, rises by exactly one run's for that key
  same caller     with --same-caller-header: the concurrency check's key,
                  sent by the same caller with another credential (a
                  refreshed token: the header replaces -H's of its name),
                  gets the first answer replayed and runs nothing; a scope
                  that follows the credential (idemkey's default scope
                  does) fails it: set the middleware's Options.Scope

After the side-effect check the fingerprint probes find out what the
fingerprint covers, and change no verdict: on a fresh key of their own (one
more run), the same key with one JSON value changed, with an extra query
parameter, and with the body re-indented and its members reordered.

Every request goes on a fresh connection (so net/http never resends one on
its own), redirects are not followed, and the key is a fresh UUIDv7 per
check. --report FILE.md writes the idempotency guide's template filled in
from what was observed; what cannot be observed from outside (storage,
retention, scope by caller, downstream keys, crash recovery) is marked so.

Exit status: 0 when every check passes, 1 when any fails, 2 on a usage
error, when the endpoint is unreachable or the count cannot be read.
`

// synopsis is the flags' line of the usage.
const synopsis = "--url URL [--method POST] [--body JSON | --body-file F] [--alt-body JSON]\n" +
	"                      [-H 'Name: value']... [--key-header Idempotency-Key] [--parallel 20] [--optional-key]\n" +
	"                      [--count-url URL --count-field NAME] [--side-effects-per-run 1] [--fault-header 'Name: value']\n" +
	"                      [--same-caller-header 'Name: value']...\n" +
	"                      [--timeout 10s] [--json] [--report FILE.md]"

// flagWords name the flags in the checks' messages.
var flagWords = Words{
	OptionalKey: "--optional-key",
	AltBody:     "--alt-body",
	Count:       "--count-url",
	Fault:       "--fault-header",
	Request:     "--body and -H",
	SameCaller:  "--same-caller-header",
}

// sameHeaders reports whether a and b hold the same fields and values.
func sameHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for name, va := range a {
		if !slices.Equal(va, b[name]) {
			return false
		}
	}
	return true
}

// Command runs "idemkey verify" with args (the arguments after "verify"),
// writing the result to stdout and diagnostics to stderr, and returns the
// process exit code: 0 when every check passes, 1 when any fails, 2 on a
// usage error, when the endpoint is unreachable or the count cannot be
// read. It prints the usage and returns 0 for -h.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: idemkey verify %s\n\n%s\nFlags:\n", synopsis, about)
		fs.PrintDefaults()
	}
	var headers, sameCaller httpflag.Headers
	var (
		target      = fs.String("url", "", "the endpoint's `URL`, http or https (required)")
		method      = fs.String("method", http.MethodPost, "HTTP `method`")
		body        = fs.String("body", "", "request `body`, e.g. a JSON document (Content-Type: application/json unless -H sets one)")
		bodyFile    = fs.String("body-file", "", "read the request body from `file`")
		altBody     = fs.String("alt-body", "", "the different `body` of the mismatch check; default: --body with one JSON value changed")
		keyHeader   = fs.String("key-header", idemclient.HeaderKey, "the request `header` that carries the key")
		parallel    = fs.Int("parallel", DefaultParallel, "copies sent at once by the concurrency check")
		optionalKey = fs.Bool("optional-key", false, "the endpoint allows requests without a key: skip the missing-key check")
		countURL    = fs.String("count-url", "", "a JSON `URL` with a side-effect counter, read before and after the checks")
		countField  = fs.String("count-field", "", "the counter's member `name` in the --count-url JSON object (dots reach into nested objects)")
		fault       = fs.String("fault-header", "", "a `header` \"Name: value\" that makes the server lose its answer; enables the lost-response check")
		perRun      = fs.Int64("side-effects-per-run", 1, "how far one run moves the --count-url counter: 0 for an outcome with no side effect (a declined card)")
		timeout     = fs.Duration("timeout", DefaultTimeout, "bound on each request, its 409 retries included")
		asJSON      = fs.Bool("json", false, "print the result as one JSON object")
		report      = fs.String("report", "", "write the filled-in idempotency template to `FILE.md`")
	)
	fs.Var(&headers, "H", "extra request `header` \"Name: value\" (repeatable); a Host header sets the request's host")
	fs.Var(&sameCaller, "same-caller-header", "the same caller's other credential, a `header` \"Name: value\" replacing -H's of that name (repeatable); enables the same-caller check")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2 // the flag package has printed the error and usage
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "idemkey verify: %s\nRun 'idemkey verify -h' for usage.\n", fmt.Sprintf(format, a...))
		return 2
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	cfg := Config{Method: *method, KeyHeader: http.CanonicalHeaderKey(*keyHeader), Parallel: *parallel,
		OptionalKey: *optionalKey, CountName: *countField, Timeout: *timeout, Words: flagWords}
	var err error
	if cfg.URL, err = httpflag.ParseURL(*target); err != nil {
		return bad("--url: %v", err)
	}
	switch {
	case !httpflag.IsToken(*method):
		return bad("--method: invalid method %q", *method)
	case !httpflag.IsToken(*keyHeader):
		return bad("--key-header: invalid header name %q", *keyHeader)
	case cfg.Parallel < 2 || cfg.Parallel > MaxParallel:
		return bad("--parallel must be 2 to %d, got %d", MaxParallel, cfg.Parallel)
	case cfg.Timeout <= 0:
		return bad("--timeout must be positive, got %s", cfg.Timeout)
	case set["body"] && set["body-file"]:
		return bad("--body and --body-file are mutually exclusive")
	case (*countURL == "") != (*countField == ""):
		return bad("--count-url and --count-field go together")
	case *perRun < 0:
		return bad("--side-effects-per-run must not be negative, got %d", *perRun)
	case set["side-effects-per-run"] && *countURL == "":
		return bad("--side-effects-per-run needs --count-url")
	}
	cfg.PerRun = perRun
	if *countURL != "" {
		if _, err := httpflag.ParseURL(*countURL); err != nil {
			return bad("--count-url: %v", err)
		}
	}
	cfg.Body = []byte(*body)
	if set["body-file"] {
		if cfg.Body, err = os.ReadFile(*bodyFile); err != nil {
			return bad("--body-file: %v", err)
		}
	}
	if set["alt-body"] {
		cfg.AltBody = []byte(*altBody)
		if bytes.Equal(cfg.AltBody, cfg.Body) {
			return bad("--alt-body is the same as the body")
		}
	}
	cfg.Header = headers.Header
	if cfg.Header == nil {
		cfg.Header = http.Header{}
	}
	if _, ok := cfg.Header[cfg.KeyHeader]; ok {
		return bad("-H: %s is set by each check and cannot be given", cfg.KeyHeader)
	}
	if hosts := cfg.Header.Values("Host"); len(hosts) > 0 {
		cfg.Host = hosts[len(hosts)-1]
		cfg.Header.Del("Host")
	}
	if len(cfg.Body) > 0 && cfg.Header.Get("Content-Type") == "" {
		cfg.Header.Set("Content-Type", "application/json")
	}
	if set["same-caller-header"] {
		same := cfg.Header.Clone()
		for name, values := range sameCaller.Header {
			if name == cfg.KeyHeader || name == "Host" {
				return bad("--same-caller-header cannot set %s", name)
			}
			same[name] = values
		}
		if sameHeaders(same, cfg.Header) {
			return bad("--same-caller-header must change a credential -H sends, e.g. --same-caller-header 'Authorization: Bearer <refreshed token>'")
		}
		cfg.SameCallerHeader = same
	}
	var faultName, faultValue string
	if set["fault-header"] {
		if faultName, faultValue, err = httpflag.ParseHeader(*fault); err != nil {
			return bad("--fault-header: %v", err)
		}
		if faultName == cfg.KeyHeader {
			return bad("--fault-header cannot be the key header")
		}
		if _, ok := cfg.Header[faultName]; ok {
			return bad("--fault-header: -H sets %s on every request too", faultName)
		}
		cfg.Lose = "with " + faultName + ": " + faultValue
		cfg.LoseHint = "does the server honour the fault header?"
	}
	var reportFile *os.File
	if *report != "" {
		// Created before any request, so that a path that cannot be
		// written is a usage error, not a lost report after the run.
		if reportFile, err = os.Create(*report); err != nil {
			return bad("--report: %v", err)
		}
		defer reportFile.Close()
	}

	tgt := NewURLTarget(*countURL, *countField, faultName, faultValue, cfg.Timeout)
	defer tgt.Close()
	rep, err := Run(ctx, tgt, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "idemkey verify: %v\n", err)
		if reportFile != nil { // nothing to report: leave no empty file behind
			_ = reportFile.Close()
			_ = os.Remove(*report)
		}
		return 2
	}
	if *asJSON {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteText(stdout)
	}
	if err == nil && reportFile != nil {
		if err = rep.WriteMarkdown(reportFile); err == nil {
			err = reportFile.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "idemkey verify: %v\n", err)
		return 2
	}
	if rep.Verdict != VerdictPass {
		return 1
	}
	return 0
}
