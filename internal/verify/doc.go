// Package verify holds the idempotency verification list, written once:
// "idemkey verify" (Command) runs it against a server at a URL, and package
// idemkeytest against an http.Handler in process. The checks see the
// endpoint only through a Target: NewURLTarget sends each request over HTTP
// on a fresh connection and reads the side-effect counter from a JSON URL;
// NewHandlerTarget calls ServeHTTP, as net/http's server would, and reads
// the counter from a function.
//
// A run is a Session: Start reads the counter, each of Steps runs one
// check (or the fingerprint probes, which judge nothing) and adds it to the
// Report, and Finish gives the verdict. Run does all of it, for the
// command; idemkeytest runs each step as a subtest. The steps run in
// order, once each: replay, mismatch and same-caller compare with the
// answer the concurrency check saw; the fingerprint probes use a key of
// their own, so that what they report draws on no other check's requests.
//
// Each check is a list of clauses, each one thing the contract requires and
// what was seen; a check fails when a clause does not hold. What a run can
// tell only in process (another caller's credentials, a crash hook, the
// store's Redis) comes with Config.Kit: the scope, crash-resume and ttl
// checks, and a clause on the counter in every check that sends keyed
// requests. The same-caller check runs with Config.SameCallerHeader (and
// is listed, skipped without it, in every Kit run). Without Kit the report is what "idemkey verify" has always
// printed; its flags, output and exit codes are a public contract.
//
// Report writes itself as text (WriteText), JSON (WriteJSON) and the
// idempotency guide's template (WriteMarkdown, "## Idempotency for
// <endpoint>"). Text the endpoint chose (bodies, headers) is quoted before
// it reaches a terminal or Markdown.
package verify
