package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/idemkey/idemkey/internal/httpflag"

	"github.com/idemkey/idemkey/idemclient"
)

const verifyAbout = `Runs the idempotency verification list against one endpoint and says, check
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
                  exactly 1 across the checks above
  lost response   with --fault-header: the first attempt of a fresh key
                  carries that header (e.g. 'X-Demo-Fault: drop-response'
                  for 'idemkey serve --faults'), which must lose the answer;
                  the retry without it gets the replay, and the count, if
                  given, rises by exactly 1 for that key

After the mismatch check two probes find out what the fingerprint covers,
and change no verdict: the request with an extra query parameter, and the
body re-indented with its members reordered.

Every request goes on a fresh connection (so net/http never resends one on
its own), redirects are not followed, and the key is a fresh UUIDv7 per
check. --report FILE.md writes the idempotency guide's template filled in
from what was observed; what cannot be observed from outside (storage,
retention, scope by caller, downstream keys, crash recovery) is marked so.

Exit status: 0 when every check passes, 1 when any fails, 2 on a usage
error, when the endpoint is unreachable or the count cannot be read.
`

const (
	verifyDefaultParallel = 20
	verifyMaxParallel     = 1000
	verifyDefaultTimeout  = 10 * time.Second
	// verifyMaxAttempts bounds the 409 retries of one request, whatever
	// --timeout allows.
	verifyMaxAttempts = 100
	// verifyMaxBody bounds a response body the checks read.
	verifyMaxBody = 4 << 20
	// verifyLongKey is the length of the over-long key: over the 255 of
	// the IETF draft and of Stripe.
	verifyLongKey = 300
	// queryProbe is the parameter the query probe adds to the URL.
	queryProbe = "idemkey_verify=query"
)

// The names of the checks, as --json prints them.
const (
	checkMissingKey   = "missing-key"
	checkMalformedKey = "malformed-key"
	checkConcurrency  = "concurrency"
	checkReplay       = "replay"
	checkMismatch     = "mismatch"
	checkSideEffects  = "side-effects"
	checkLostResponse = "lost-response"
)

// The results of a check.
const (
	resultOK   = "ok"
	resultFail = "fail"
	resultSkip = "skip"
)

// errUnreachable ends a run whose first request got no HTTP response.
var errUnreachable = errors.New("unreachable")

// verifyConfig is what "idemkey verify" runs.
type verifyConfig struct {
	target      *url.URL
	method      string
	body        []byte
	altBody     []byte // nil: derived from body
	header      http.Header
	host        string // a Host given with -H
	keyHeader   string
	parallel    int
	optionalKey bool
	countURL    string
	countField  string
	faultName   string // "" without --fault-header
	faultValue  string
	timeout     time.Duration
}

func verify(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("verify", "--url URL [--method POST] [--body JSON | --body-file F] [--alt-body JSON]\n"+
		"                      [-H 'Name: value']... [--key-header Idempotency-Key] [--parallel 20] [--optional-key]\n"+
		"                      [--count-url URL --count-field NAME] [--fault-header 'Name: value']\n"+
		"                      [--timeout 10s] [--json] [--report FILE.md]", verifyAbout, stderr)
	var headers httpflag.Headers
	var (
		target      = fs.String("url", "", "the endpoint's `URL`, http or https (required)")
		method      = fs.String("method", http.MethodPost, "HTTP `method`")
		body        = fs.String("body", "", "request `body`, e.g. a JSON document (Content-Type: application/json unless -H sets one)")
		bodyFile    = fs.String("body-file", "", "read the request body from `file`")
		altBody     = fs.String("alt-body", "", "the different `body` of the mismatch check; default: --body with one JSON value changed")
		keyHeader   = fs.String("key-header", idemclient.HeaderKey, "the request `header` that carries the key")
		parallel    = fs.Int("parallel", verifyDefaultParallel, "copies sent at once by the concurrency check")
		optionalKey = fs.Bool("optional-key", false, "the endpoint allows requests without a key: skip the missing-key check")
		countURL    = fs.String("count-url", "", "a JSON `URL` with a side-effect counter, read before and after the checks")
		countField  = fs.String("count-field", "", "the counter's member `name` in the --count-url JSON object (dots reach into nested objects)")
		fault       = fs.String("fault-header", "", "a `header` \"Name: value\" that makes the server lose its answer; enables the lost-response check")
		timeout     = fs.Duration("timeout", verifyDefaultTimeout, "bound on each request, its 409 retries included")
		asJSON      = fs.Bool("json", false, "print the result as one JSON object")
		report      = fs.String("report", "", "write the filled-in idempotency template to `FILE.md`")
	)
	fs.Var(&headers, "H", "extra request `header` \"Name: value\" (repeatable); a Host header sets the request's host")
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	bad := func(format string, a ...any) int { return usageError(stderr, "verify", format, a...) }
	if fs.NArg() > 0 {
		return bad("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	cfg := verifyConfig{method: *method, keyHeader: http.CanonicalHeaderKey(*keyHeader), parallel: *parallel,
		optionalKey: *optionalKey, countURL: *countURL, countField: *countField, timeout: *timeout}
	var err error
	if cfg.target, err = httpflag.ParseURL(*target); err != nil {
		return bad("--url: %v", err)
	}
	switch {
	case !httpflag.IsToken(*method):
		return bad("--method: invalid method %q", *method)
	case !httpflag.IsToken(*keyHeader):
		return bad("--key-header: invalid header name %q", *keyHeader)
	case cfg.parallel < 2 || cfg.parallel > verifyMaxParallel:
		return bad("--parallel must be 2 to %d, got %d", verifyMaxParallel, cfg.parallel)
	case cfg.timeout <= 0:
		return bad("--timeout must be positive, got %s", cfg.timeout)
	case set["body"] && set["body-file"]:
		return bad("--body and --body-file are mutually exclusive")
	case (cfg.countURL == "") != (cfg.countField == ""):
		return bad("--count-url and --count-field go together")
	}
	if cfg.countURL != "" {
		if _, err := httpflag.ParseURL(cfg.countURL); err != nil {
			return bad("--count-url: %v", err)
		}
	}
	cfg.body = []byte(*body)
	if set["body-file"] {
		if cfg.body, err = os.ReadFile(*bodyFile); err != nil {
			return bad("--body-file: %v", err)
		}
	}
	if set["alt-body"] {
		cfg.altBody = []byte(*altBody)
		if bytes.Equal(cfg.altBody, cfg.body) {
			return bad("--alt-body is the same as the body")
		}
	}
	cfg.header = headers.Header
	if cfg.header == nil {
		cfg.header = http.Header{}
	}
	if _, ok := cfg.header[cfg.keyHeader]; ok {
		return bad("-H: %s is set by each check and cannot be given", cfg.keyHeader)
	}
	if hosts := cfg.header.Values("Host"); len(hosts) > 0 {
		cfg.host = hosts[len(hosts)-1]
		cfg.header.Del("Host")
	}
	if len(cfg.body) > 0 && cfg.header.Get("Content-Type") == "" {
		cfg.header.Set("Content-Type", "application/json")
	}
	if set["fault-header"] {
		if cfg.faultName, cfg.faultValue, err = httpflag.ParseHeader(*fault); err != nil {
			return bad("--fault-header: %v", err)
		}
		if cfg.faultName == cfg.keyHeader {
			return bad("--fault-header cannot be the key header")
		}
		if _, ok := cfg.header[cfg.faultName]; ok {
			return bad("--fault-header: -H sets %s on every request too", cfg.faultName)
		}
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

	rep, err := runVerify(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "idemkey verify: %v\n", err)
		if reportFile != nil { // nothing to report: leave no empty file behind
			_ = reportFile.Close()
			_ = os.Remove(*report)
		}
		return 2
	}
	if *asJSON {
		err = rep.writeJSON(stdout)
	} else {
		err = rep.writeText(stdout)
	}
	if err == nil && reportFile != nil {
		if err = rep.writeMarkdown(reportFile); err == nil {
			err = reportFile.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "idemkey verify: %v\n", err)
		return 2
	}
	if rep.Verdict != verdictPass {
		return 1
	}
	return 0
}
