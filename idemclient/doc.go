// Package idemclient is the client half of the Idempotency-Key contract: an
// http.RoundTripper that makes retries safe by construction. It mints one
// key per request, sends it with the same body on every attempt, and
// retries only what the server's answer says is worth retrying, so that one
// logical operation ends with one execution on the server and one final
// answer to the caller. It uses the standard library only.
//
//	t, err := idemclient.New(nil, idemclient.Options{})
//	if err != nil { ... }
//	client := &http.Client{Transport: t, Timeout: 30 * time.Second}
//	resp, err := client.Post(url, "application/json", strings.NewReader(body))
//	r, _ := idemclient.ResultOf(resp, err) // attempts, key, replayed, Retry-After
//
// # Keys
//
// A request whose method is in Options.Methods (POST and PATCH by default;
// add PUT and DELETE if the server keys them too) and that has no
// Idempotency-Key header gets one before its first attempt: a UUIDv7
// (NewKey), or the key pinned in its context with WithKey. The Transport
// never changes a key the caller set: it is sent as it is, on every attempt.
// The key is set on the outgoing request, so the base transport's own
// replay of a request on a stale keep-alive connection carries it too.
//
// Exactly one header is sent. A request with more than one Idempotency-Key
// header, or whose header and pinned key differ, fails with ErrInvalidKey
// before anything is sent, as does a pinned key that is empty, longer than
// MaxKeyLen (255) bytes or not printable ASCII. Options.KeyFormat writes the
// key as a bare token (the default, as Stripe's clients send it) or as an
// RFC 8941 sf-string ("…", as the IETF draft specifies).
//
// # Bodies
//
// A retried request has a byte-identical body. It comes from the request's
// GetBody (http.NewRequest sets it for *bytes.Buffer, *bytes.Reader and
// *strings.Reader bodies); otherwise the Transport buffers the body, up to
// Options.MaxBodyBytes (1 MiB). A larger body without GetBody is sent once
// and never retried (Result.Stop is StopBodyTooLarge). Before a retry the
// previous response body is drained (up to 64 KiB) and closed, so its
// connection is reused.
//
// The Transport also reads ahead up to Options.ResponseBuffer (1 MiB) of
// each response body before returning it: a connection lost in the middle
// of a response is then a failed attempt, retried with the same key,
// rather than an error in the caller's Read.
//
// # Which answers are retried
//
// A request is retried only if it carries a key or its method is
// idempotent by HTTP's definition (GET, HEAD, OPTIONS, TRACE, PUT, DELETE);
// other requests are sent once (StopUnsafe). Then:
//
//   - Retried, with the same key: 409 Conflict (the first attempt is still
//     in progress; only for keyed requests), 429, 502, 503, 504, and
//     network errors (refused, reset, closed before or during the
//     response, an AttemptTimeout that ran out).
//   - Retried unless it is a replay: 500. A response with
//     Idempotent-Replayed: true is never retried, whatever its status: it
//     is the stored outcome of an earlier attempt, and a retry gets it
//     again.
//   - Never retried: 400, 422 (the key was used for another request), any
//     other 4xx, 501 and other 5xx, 1xx–3xx. Redirects are returned as
//     they are; http.Client follows them and stops redirect loops, and a
//     307/308 hop is a new request to the Transport (pin the key with
//     WithKey to keep it across hops).
//   - Never retried: TLS certificate verification errors, a plain-HTTP
//     answer to HTTPS, unsupported URL schemes, unknown hosts, and the
//     request context's cancellation.
//
// # Waiting
//
// Between attempts the Transport waits Policy.Delay: the server's
// Retry-After (seconds or an HTTP-date, see ParseRetryAfter) clamped to
// Policy.MaxRetryAfter (30s), else exponential backoff with full jitter
// from Policy.BaseDelay (100ms) up to Policy.MaxDelay (10s). It never
// waits past the request context's deadline: if the wait would end there,
// it returns the answer it has (StopDeadline). At most Options.MaxAttempts
// (5) attempts are made.
//
// Each host has a retry Budget, a token bucket: every request adds
// BudgetOptions.Ratio (0.2) of a token, time adds BudgetOptions.PerSecond
// (1) a second up to BudgetOptions.Burst (10), and every retry takes one.
// With the bucket empty the Transport returns the answer it has
// (StopBudget), so a fleet of clients cannot amplify an outage into a
// retry storm; as requests succeed again and time passes, retries resume.
// Budget.Tokens tells what a host has left; Transport.Options and
// Budget.Options give the options in effect, defaults applied.
//
// Policy (Retryable and Delay) and ParseRetryAfter are exported for any
// other retry loop that should follow the same rules: idemkey storm's load
// mode retries with them.
//
// # Retry policies
//
// Options.RetryPolicy replaces the waits and the Budget above by a retry
// policy chosen by name, the same that idemkey storm's --retry-policy
// compares side by side under a fault, so that the one that held up is
// shipped with one option:
//
//   - backoff: Policy's waits, no limit but MaxAttempts (storm's default);
//   - naive: retry at once, up to MaxAttempts;
//   - budget: backoff, and a retry only while the retries of the last 10 s
//     are at most 20 % of the requests of those 10 s plus 10 a second
//     (Finagle's RetryBudget);
//   - token-bucket: backoff, and a retry only with a token: each retry
//     spends one from a bucket of 100, each accepted attempt puts back a
//     tenth (the AWS SDKs' retry quota);
//   - adaptive: backoff, and every attempt, first or retry, rejected
//     locally with the probability max(0, (requests − 2·accepts) /
//     (requests + 1)) over the last 2 minutes (the SRE book's client-side
//     throttling).
//
// Each keeps its memory per host; Transports that share a RetryPolicy share
// it. A retry refused by the policy returns the answer in hand (StopBudget,
// StopThrottled); a first attempt rejected by adaptive fails with
// ErrThrottled, nothing sent. See RetryPolicy for a retry loop of one's own.
//
// # What happened
//
// Every request ends with a Result: the key sent and whether it was
// minted, the attempts (each with its status or error, and the wait after
// it), whether the final answer was a replay, the last Retry-After, and
// why the Transport stopped. Read it in either of two ways:
//
//   - ResultOf(resp, err) after the call. For a response the Result rides
//     on resp.Request (set by the Transport); for an error, on the *Error
//     the Transport returns (errors.As finds it inside http.Client's
//     *url.Error). The key of a failed request is there, to pin it with
//     WithKey when the operation is tried again later.
//   - Options.OnResult, a callback made once per request, for logs and
//     metrics.
//
// When the Transport gives up on a retryable answer (attempts, budget,
// deadline), it returns that answer — a 503, say — as the response, not an
// error; when it gives up after a network error, it returns an *Error
// wrapping the last one.
package idemclient
