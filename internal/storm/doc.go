// Package storm implements "idemkey storm", a retry-storm load tester for
// HTTP APIs that claim to honour the Idempotency-Key header.
//
// # What a storm does
//
// A storm generates Config.Keys fresh random keys (UUIDv4 format, from
// crypto/rand, optionally prefixed with Config.KeyPrefix) and sends
// Config.Dups identical requests for every key: same method, URL, headers
// and body, and the header "Idempotency-Key: <key>". Config.Concurrency
// workers take the (key, duplicate) pairs from a single queue in key-major
// order, so the duplicates of one key are dispatched back to back. When
// Dups <= Concurrency the duplicates of a key additionally wait at a
// per-key gate until all of them have been picked up by a worker and are
// then released together, so they are guaranteed to be in flight at the
// same time: that overlap is the point of a storm. Every attempt has its own
// timeout (Config.Timeout). Redirects are not followed.
//
// With Config.Retry409 a "409 Conflict" answer that is not a replay is
// retried after the delay given by its Retry-After header (delta seconds,
// fractions such as "0.25" allowed, or an HTTP date; 1s when the header is
// absent or malformed; capped at 30s per wait) until a non-409 answer
// arrives or Config.MaxRetries retries (default 100) have been made, so a
// storm always ends.
//
// # Classifying responses
//
// Every attempt of a key falls into exactly one class, checked in this
// order:
//
//   - error: the request failed at the transport level (connection refused,
//     timeout, reset, truncated body). It has no status.
//   - replay: an HTTP response carrying "Idempotent-Replayed: true"
//     (case-insensitive value), whatever its status, 409 included.
//   - in progress: a 409 response without the replay header; the server
//     says the first request for the key is still running. It is neither an
//     execution nor a final answer.
//   - server error: a 5xx response without the replay header. A correct
//     idempotent server does not store 5xx outcomes and releases the key, so
//     a later duplicate may legitimately execute again. Server errors are
//     therefore not counted as executions and are excluded from the
//     comparison below. Report.Errors counts transport and server errors.
//   - original: any other response (1xx–4xx except 409) without the replay
//     header, i.e. a response produced by actually executing the request.
//
// The "final" responses of a key are its originals and its replays.
//
// # Verdict
//
// A key PASSES when both hold:
//
//  1. it has at most one original; more than one means the side effect ran
//     more than once ("executed N times");
//  2. all its final responses are identical: same status code and
//     byte-equal body (compared through SHA-256); otherwise it is
//     "divergent".
//
// Headers other than Idempotent-Replayed are not compared. A key with no
// final response at all (only 409s or errors) passes; it is counted in
// Report.KeysUnresolved. Note that a server that answers a first execution
// with a 4xx and does not store it will fail rule 1, because every duplicate
// then executes again; the per-key status counts in the failure make that
// visible.
//
// The storm passes (Report.Pass) when no key failed, at least one HTTP
// response was received, and the run was not interrupted.
//
// # Exit codes
//
// Command, the CLI entry point, returns:
//
//   - 0 when the storm passed;
//   - 1 when at least one key failed the verdict (a definite violation wins
//     over everything else, even in an interrupted run);
//   - 2 on usage errors (bad flags, invalid URL, both --body and
//     --body-file), when not a single HTTP response was received (for
//     example every request hit "connection refused"), or when the run was
//     interrupted before it completed without any key failing.
//
// Transport errors on some requests do not change the exit code on their
// own; they are reported in the error counts.
package storm
