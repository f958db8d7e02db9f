// Package storm is a retry-storm load tester for HTTP APIs that claim to
// honour idempotency keys, and the checker of its verdict: the library
// behind "idemkey storm" and "idemkey check". Run sends the storm and
// records every attempt (a History); Check judges a history by named
// rules; Run's report is Check's over the history it recorded, so a
// history saved with Config.History and judged later (ReadHistory, Check,
// or "idemkey check") gives the same verdict and report. storm/README.md
// documents the history format field by field.
//
// # What a storm does
//
// A storm generates Config.Keys fresh keys (UUIDv7, as idemclient mints
// them, optionally prefixed with Config.KeyPrefix) and sends
// Config.Dups identical requests for every key: same method, URL, headers
// and body, and the key in the header Config.KeyHeader ("Idempotency-Key"
// by default). Config.Concurrency workers take the (key, duplicate) pairs
// from a single queue in key-major order, so the duplicates of one key are
// dispatched back to back. When Dups <= Concurrency the duplicates of a key
// additionally wait at a per-key gate until all of them have been picked up
// by a worker and are then released together, so they are guaranteed to be
// in flight at the same time: that overlap is the point of a storm.
// Config.Timeout bounds every request, its retries included. Redirects are
// not followed.
//
// Different keys may send different requests: Config.BodyFor and
// Config.HeaderFor give each key its own body and headers. The command's
// placeholders build them: in -H values and in the body, "{n}" is replaced
// by the key's index (0 to keys-1) and "{key}" by the key itself, the same
// for every duplicate of a key; -H 'X-User: user-{n}' makes every key a
// different caller, to storm an API that scopes keys by caller.
//
// # Load mode
//
// With Config.Rate or Config.Duration (--rate, --duration) a storm is a
// load test instead of a burst: operations start on a fixed schedule,
// Rate a second for Duration (100/s and 10s by default), whatever the
// server does (open loop: a slow server does not slow the arrivals). Each
// operation has a fresh key of its own and is sent Dups times at once (1
// by default: a client, not a double click). Every copy is a client of its
// own: it gives up on an attempt after Config.AttemptTimeout and asks
// again with the same key and body, up to Config.Retries times (3), after
// the wait of Config.Policy (the answer's Retry-After, capped at 30s, else
// exponential backoff with full jitter between --backoff's bounds, 100ms
// and 10s by default); which answers it retries is Policy.Retryable's:
// 409, 429, 500, 502, 503, 504 and network errors, never a replay. That is
// what idemclient's Transport does: one retry policy for the client and the
// storm. Config.Timeout bounds the whole operation, its attempts and waits.
// At most Config.MaxInFlight attempts (1000) are in flight; an operation
// whose first attempt has to wait for a slot is late, and every operation's
// latency counts from its scheduled start, the wait included, so that a
// stalled server cannot hide behind a stalled generator (no coordinated
// omission); an operation that never started counts as having taken the
// whole Timeout.
//
// An operation is completed when every copy got a final answer (an
// original below 500 or a replay), failed when a copy gave up without one.
// The report adds (Report.Load): operations scheduled, started, completed,
// failed, late and not started; attempts; amplification (attempts per
// operation started) and its peak (the highest of one scheduled second:
// the attempts of the operations scheduled in it per operation, with the
// second); goodput (operations completed per second of the schedule) and
// exactly-once goodput (those whose key passed); the achieved rate and
// start lag of the schedule; operation latency (p50, p90, p99, max, from
// the scheduled start), attempt latency; and a timeline: per second of the
// run, the operations scheduled in it (with their latency percentiles, and
// how many were late) and the attempts sent in it by answer class
// (original, replay, in progress, retry later, 5xx, timeout, transport
// error: there the classes partition the attempts, originals without the
// 5xx and transport errors without the timeouts).
//
// Config.MaxP99, MaxAmplification, MinGoodput, MinExactlyOnceGoodput and
// MaxPeakAmplification are thresholds, as k6 has them: the verdict is
// computed as ever, and a broken threshold is listed in the report
// (Report.Thresholds) and makes Report.ExitCode 1. Report.WriteHTML
// writes the report as one self-contained HTML page (--report FILE): the
// verdict and summary, then charts over time drawn as inline SVG from the
// run's numbers (attempts per second stacked by answer class, operation
// latency p50 and p99, amplification). With a terminal as stderr, the
// command rewrites a progress line once a second.
//
// Config.Stages (--stages D:R,…) ramp the arrival rate linearly from Rate
// to each stage's rate over its duration, as k6's ramping-arrival-rate
// does; each second of the timeline then has the operations the schedule
// put in it (Second.Scheduled) beside those that started in it
// (Second.Started). Report.WriteCSV (--csv) writes the timeline as CSV, one
// row per second. Config.Metrics (--metrics-addr) receives the live
// figures, which Metrics serves in the Prometheus text format.
//
// # The history
//
// Every attempt is recorded (Attempt): its operation and key, its copy and
// number, when it was sent and when its answer was complete (monotonic, from
// the storm's start), its class, status, replay header and body digest,
// whether storm sent another attempt of the same copy after it (Retried),
// and whether it was the late probe's. An attempt is recorded once that is
// known, so an operation's attempts are in that order. With
// Config.History the history is also written as JSON Lines as the storm
// goes, through a buffer of fixed size: a header, the attempts, one line
// per operation when it ends, an end line and the counts.
//
// # Classifying answers
//
// Every attempt falls into exactly one class (Class), checked in this
// order:
//
//   - timeout or transport error: no complete HTTP response (connection
//     refused, reset, truncated body); a timeout when the client's own
//     timeout cut it.
//   - replay: a response carrying "Idempotent-Replayed: true"
//     (case-insensitive value), whatever its status.
//   - in progress: 409 without the replay header; the first request for
//     the key is still running.
//   - retry later: 408, 425, 429 or 503 without the replay header; the
//     server did not run the request, or ran it and released the key
//     (idemkey's middleware stores none of these statuses).
//   - server error (other 5xx): never an execution, retried or not:
//     idemkey releases a key on a 5xx and the next attempt runs it again
//     (a 500 then a 201 is one charge). A key whose every answer is a 5xx
//     has no final answer, and a late probe answered 5xx got none.
//   - mismatch (422), client error (other 4xx) and original (anything
//     else): the server ran the request (executions).
//
// A final answer is a replay or an execution that ended its copy: an
// answer that storm retried is not final. The others are never final.
//
// A replay whose body is an application/problem+json document whose "type"
// ends in "response-too-large" and whose "status" is the response's status
// is idemkey's stand-in for an original body over MaxResponseBytes: it
// counts as identical to the final answers of the same status
// (Report.OversizeReplays counts them).
//
// # The late probe
//
// When every request of the storm has ended, one more duplicate is sent for
// every key that has a final answer and has not failed, from a client that
// opens a fresh connection for each request (when Config.Client is nil; a
// given Client serves the probe as it is). It must be a replay identical in
// status and body to the key's final answer. A server that holds a lock
// while the first request runs and stores nothing passes the storm itself,
// its duplicates all getting 409, and fails here, because the probe runs
// again. Config.NoProbe (--no-probe) skips it.
//
// # The rules
//
// Check decides every key by these rules, and names the one that decided
// a key that did not pass (Failure.Rule; Report.Rules counts them):
//
//   - at-most-once (RuleAtMostOnce): a key with two executions, the
//     probe's included, fails. An attempt whose answer was lost (a timeout
//     or a transport error), sent before a replay showed the key's outcome
//     stored (an original's answer does not: it may leave the server
//     before its record is stored), may have run too, and may still be running: a key
//     whose executions and such lost attempts number two or more is
//     unproven from the answers alone, and so is a key replayed without an
//     execution or a lost attempt to explain it. An unproven key is
//     inconclusive unless a count or a ledger decides it (below).
//   - retries-not-final (RuleRetriesNotFinal): a 5xx, 408, 425, 429 or 503
//     that storm retried is neither an execution nor a final answer; only
//     the answer that ended a copy is. It decides every key that had a 5xx
//     storm retried. A server that really ran a key behind its 5xx shows
//     in a side-effect count, not in the answers.
//   - one-answer (RuleOneAnswer): every final answer of a key has the same
//     status and body (compared through SHA-256).
//   - no-lost-success (RuleNoLostSuccess): a key with a final answer is
//     replayed identically to the late probe; a probe that ran it again or
//     replayed another answer fails it, one without a final answer leaves
//     it inconclusive.
//   - liveness (RuleLiveness): a key with no final answer is inconclusive,
//     and the report lists the attempts it got.
//
// # Side-effect counts and ledgers
//
// With Config.CountURL and Config.CountField or Config.Counts (--count-url,
// --count-field NAME[=N], repeatable), the storm reads numbers from a JSON
// endpoint with GET before the storm and after the probe (Config.Settle
// after the last attempt, when an attempt lost its answer: its execution
// may still be running behind the client's timeout): the members
// named (dots reach into nested objects), which must be integers, e.g. the
// "provider_charges" of the /v1/stats of "idemkey serve". Those requests
// carry none of the storm's headers. Each count must grow by its Want
// (side effects per operation, 1 by default, 0 for none) times the keys
// whose final answer was a 2xx or 3xx (passed, or unproven: once at
// least), plus at most Want for each other key sent (no final answer, or a
// 4xx: it may have run, once, or not). A count
// outside that fails the storm; a count that grew by exactly the least
// proves every unproven key ran once, and they pass. A count that cannot
// be read before the storm stops it before anything is sent (Run returns
// an error wrapping ErrCount).
//
// With a ledger (History.Ledger, "idemkey check --ledger"), the side
// effects the service recorded, at most once is decided key by key
// instead: a key with two executions in the ledger fails, an unproven key
// passes only with exactly one. A ledger that disagrees with the history
// (keys the history does not have, malformed effects) makes the verdict
// inconclusive (LedgerSummary.Disagreement).
//
// # Verdict and exit codes
//
// The verdict (Report.Verdict) is
//
//   - "fail" when a key failed, or a count was read and grew by another
//     number than the keys allow (Count.OK);
//   - otherwise "inconclusive" when a key is inconclusive (unproven
//     included), the storm was interrupted, not a single HTTP response
//     arrived, or a count could not be read after the storm;
//   - otherwise "pass": every key passed.
//
// Command, the CLI entry point, returns 0 for pass; 1 for fail or
// inconclusive; 2 for usage errors (bad flags, an invalid URL, both --body
// and --body-file, a --count-url that cannot be read before the storm, a
// --history that cannot be written) and when not a single HTTP response
// was received (every request refused, for example). A broken threshold
// makes it 1 whatever the verdict. CheckCommand ("idemkey check") returns
// the same for the histories it judges.
//
// # Incidents
//
// A storm can bring its trigger: fault hops (Config.Proxies, TCPProxies)
// that the service calls its dependencies through, disturbed on the run's
// clock (Config.Faults: latency, errors, down), and shell commands at a
// time of the run (Config.At). Config.RetryPolicies runs idemclient's
// retry policies as arms, one after the other on the same schedule, and
// Report.Arms sets them side by side; Report.Recovery is the time from the
// end of the last trigger until goodput and p99 are back to the baseline
// measured before the first, or metastable when they are not by the end.
// "Reproduce an incident" in storm/README.md has a worked example.
//
// --json prints the report as one JSON object; storm/README.md lists its
// members.
package storm
