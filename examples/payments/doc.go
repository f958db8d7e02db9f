// Package payments is an example payments API protected by idemkey's Gin
// middleware: the API that "idemkey serve" and "idemkey demo" run, written
// as a library user would write it, with public packages only (ginmw,
// redisstore, go-redis). Copy it.
//
// POST /v1/payments charges a simulated payment provider and records the
// payment, exactly once per (caller, Idempotency-Key), however often the
// client retries and even if the process dies half-way:
//
//  1. The middleware claims the key; duplicates get 409 (or wait, with
//     Options.Wait) and, once the first attempt is done, its stored answer.
//  2. The handler charges the provider with ginmw.DerivedKey(c, "charge"),
//     a key unique per caller, key and step, on which the provider dedupes.
//  3. It checkpoints RecoveryCharged with the charge and the ID the payment
//     will have (a Charged). If the process dies now, the next retry takes
//     the key over once the lease runs out, finds the checkpoint with
//     ginmw.RecoveryPoint and goes on from there instead of charging again.
//  4. It records the payment under that ID, once: a resumed attempt finds
//     the payment rather than creating a second one.
//  5. The middleware stores the 201 and replays it to every retry.
//
// Deterministic failures (400 for an invalid body, 402 card_declined) are
// stored and replayed like successes; a provider outage answers 503 and
// releases the key, so a retry charges.
//
// # Redis keys
//
// Idempotency records live under the store's prefix ("idem:"). The demo's
// own data lives under Config.Prefix ("demo:"), each group under one hash
// tag so that every script touches one cluster slot:
//
//	demo:{provider}:charge:<derived key>  hash    the provider's dedupe record: id, amount, currency
//	demo:{provider}:charges               counter charges made
//	demo:{provider}:deduplicated          counter charge calls answered from a dedupe record
//	demo:{payments}:payment:<id>          hash    body (the payment's JSON), owner (the caller's scope)
//	demo:{payments}:created               counter payments recorded
package payments
