// Package storm implements "idemkey storm", a retry-storm load tester for
// HTTP APIs that claim to honour idempotency keys.
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
// omission).
//
// An operation is completed when every copy got a final answer (an
// original below 500 or a replay), failed when a copy gave up without one.
// The report adds (Report.Load): operations scheduled, started, completed,
// failed, late and not started; attempts; amplification (attempts per
// operation started); goodput (operations completed per second of the
// schedule); the achieved rate and start lag of the schedule; operation
// latency (p50, p90, p99, max, from the scheduled start), attempt latency;
// and a timeline: per second of the run, the operations scheduled in it
// (with their latency percentiles, and how many were late) and the attempts
// sent in it by answer class (original, replay, in progress, retry later,
// 5xx, timeout, transport error: there the classes partition the attempts,
// originals without the 5xx and transport errors without the timeouts).
// The keys are classified, probed and counted as in the burst mode. A key
// whose first answer was lost to the client's own timeout and whose final
// answer is a replay passes: it ran once as far as its answers show;
// --count-url is what proves it, and the report says so when it was not
// given.
//
// Config.MaxP99, MaxAmplification and MinGoodput are thresholds, as k6 has
// them: the verdict is computed as ever, and a broken threshold is listed
// in the report (Report.Thresholds) and makes Report.ExitCode 1.
// Report.WriteHTML writes the report as one self-contained HTML page
// (--report FILE): the verdict and summary, then charts over time drawn as
// inline SVG from the run's numbers (attempts per second stacked by answer
// class, operation latency p50 and p99, amplification). With a terminal as
// stderr, the command rewrites a progress line once a second: elapsed,
// operations, attempts, amplification, the p99 of the last second, 409s
// and errors.
//
// # Classifying answers
//
// Every attempt falls into exactly one class, checked in this order:
//
//   - transport error: no complete HTTP response (connection refused,
//     timeout, reset, truncated body).
//   - replay: a response carrying "Idempotent-Replayed: true"
//     (case-insensitive value), whatever its status.
//   - in progress: 409 without the replay header; the first request for
//     the key is still running.
//   - retry later: 408, 425, 429 or 503 without the replay header; the
//     server did not run the request, or ran it and released the key
//     (idemkey's middleware stores none of these statuses).
//   - original: any other response without the replay header, 5xx
//     included. It is an execution: the server ran the request. A correct
//     server answers a 5xx only when its handler failed, and then releases
//     the key, so a key with a 201 and a 500 has run twice.
//
// Transport errors, in-progress and retry-later answers are not final;
// originals and replays are the final answers.
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
// every key that has passed so far (see below), from a client that opens a
// fresh connection for each request (when Config.Client is nil; a given
// Client serves the probe as it is). It must be a replay identical in
// status and body to the key's final answer. A server that holds a lock
// while the first request runs and stores nothing passes the storm itself,
// its duplicates all getting 409, and fails here, because the probe runs
// again. Keys that already failed or got no final answer are not probed:
// the probe could not change their class. Config.NoProbe (--no-probe)
// skips it.
//
// # Classifying keys
//
// A key FAILS when any of these holds:
//
//  1. it was executed more than once: more than one original, the probe's
//     included ("executed N times (...)");
//  2. its final answers in the storm are not all identical: same status
//     and byte-equal body, compared through SHA-256 ("divergent: ...");
//  3. the late probe was answered without the replay header ("late probe
//     ran it again") or replayed another status or body than the key's
//     final answer (its most frequent one).
//
// Otherwise a key is INCONCLUSIVE when it got no final answer at all (only
// 409, 408, 425, 429, 503 or transport errors, or it was never sent because
// the storm was interrupted); when its final answers are all replays and
// none of its attempts was lost (a timeout or another transport error), for
// the key is fresh and its original can only have been one of the storm's
// attempts ("replayed, never executed"); or when the late probe got no
// final answer. Otherwise it PASSED. A key that passed on replays alone,
// its original's answer lost to a timeout, ran once as far as its answers
// show: Report.ReplayOnly counts them, and only the side-effect count
// (below) proves it. Headers other than Idempotent-Replayed are not
// compared. A server that answers a first execution with a 4xx it does not
// store fails rule 1, because every duplicate then executes again; the
// statuses listed with the key make that visible.
//
// # Retries
//
// With Config.Retry (--retry, or its old name --retry-409) an answer that is
// not final is asked again with the same key: 408, 409, 425, 429 and 503
// without the replay header, and transport errors. The wait is the answer's
// Retry-After (delta seconds, fractions such as "0.25" allowed, or an HTTP
// date), at most 30s; without a usable one it is a random wait below 100ms,
// doubling with every retry, at most 2s (idemclient.Policy: the client
// transport's waiting, one implementation for both). A request stops at its first final answer, when its
// Config.Timeout would run out before the next attempt, or after
// Config.MaxRetries retries (100 by default, so a server answering
// "Retry-After: 0" cannot spin a worker). The probe retries the same way.
// The policy is retryable and retryDelay in retry.go, which waits as
// idemclient.Policy does: one implementation for storm and the client.
//
// # Side-effect count
//
// With Config.CountURL and Config.CountField (--count-url, --count-field),
// the storm reads a number from a JSON endpoint with GET before the storm
// and after the probe: the member CountField (dots reach into nested
// objects) of the object served, which must be an integer, e.g. the
// "provider_charges" of the /v1/stats of "idemkey serve". Those requests
// carry none of the storm's headers. The count must grow by the number of
// keys that passed, plus at most one for each inconclusive key: a key
// whose answers were all lost may still have run, once (with no
// inconclusive key, exactly the keys that passed). This catches a server that runs every
// duplicate and still replays perfectly. A count that cannot be read
// before the storm stops it before anything is sent (Run returns an error
// wrapping ErrCount).
//
// # Verdict and exit codes
//
// The verdict (Report.Verdict) is
//
//   - "fail" when a key failed, or the count was read after the storm and
//     grew by fewer than the keys that passed or by more than those and
//     the inconclusive ones;
//   - otherwise "inconclusive" when a key is inconclusive, the storm was
//     interrupted, not a single HTTP response arrived, or the count could
//     not be read after the storm;
//   - otherwise "pass": every key passed.
//
// Command, the CLI entry point, returns 0 for pass; 1 for fail or
// inconclusive; 2 for usage errors (bad flags, an invalid URL, both --body
// and --body-file, a --count-url that cannot be read before the storm) and
// when not a single HTTP response was received (every request refused, for
// example).
//
// --json prints the report as one JSON object: "verdict" is "pass", "fail"
// or "inconclusive"; "keys_passed", "keys_failed" and "keys_inconclusive"
// count the classes; "failures" and "inconclusive" list up to ten keys of
// each class with the statuses each got; "probe" and "count" hold the
// probe's and the count check's figures; "mode" is "burst" or "load". In
// load mode it adds "operations" (scheduled, started, completed, failed,
// late, not_started), "attempts", "amplification", "goodput",
// "achieved_rate", "latency_ms" (then the operations' latency),
// "attempt_latency_ms", "start_lag_ms", "thresholds" (name, limit, value,
// ok) and "timeline": [{"t", "operations", "late", "attempts",
// "amplification", "originals", "replays", "in_progress", "retry_later",
// "server_errors", "timeouts", "transport_errors", "p50_ms", "p99_ms"}].
//
// Exit codes: 0 for pass with no threshold broken; 1 for fail,
// inconclusive or a broken threshold; 2 as above.
package storm
