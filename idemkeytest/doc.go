// Package idemkeytest runs the idempotency verification list in go test,
// against your own HTTP handler and your own count of its side effects,
// with no server to start: the checks of "idemkey verify", from the same
// code, in process.
//
// Run takes the handler (built on whatever store it uses; NewStore gives a
// fresh embedded one) and a Config naming the endpoint, a request body and
// a function that counts the side effects the handler must make exactly
// once per request (business records, charges, emails). Each check is a
// subtest:
//
//	missing-key    the request without a key gets 400 (unless Config.OptionalKey)
//	malformed-key  a 300-character key and one with a tab each get 400
//	concurrency    20 copies at once with one key: one side effect, one
//	               original answer, the rest replays or 409 with Retry-After
//	               (retried after it until final)
//	replay         the same request again: identical status, body and
//	               Location, marked Idempotent-Replayed: true
//	mismatch       the same key with another body: 422, no side effect
//	side-effects   the checks above made exactly one side effect
//	lost-response  the kit drops a fresh key's first answer on the floor and
//	               retries: the replay, one side effect
//	same-caller    the first caller with another credential
//	               (Config.SameCallerHeader, a refreshed token) and the same
//	               key gets the replay and runs nothing: the default scope,
//	               a hash of the credential, fails it (set Options.Scope)
//	scope          another caller (Config.OtherHeader) with the same key never
//	               gets the first caller's answer, and runs on its own
//	crash-resume   a first attempt crashed by Config.Crash is completed by a
//	               retry, with one side effect
//	ttl            every key the store wrote into Config.Redis has a TTL
//
// "One side effect" is one run's: Config.SideEffectsPerRun, 1 by default,
// new(0) for an outcome that makes none (a declined card). Between
// side-effects and lost-response, fingerprint probes on a key of their own
// find out what the fingerprint covers (a changed body, the query, a
// re-indented body) and judge nothing: Run logs what they saw.
//
// A failed check names itself and says what the handler did, e.g.
//
//	idemkeytest: check replay failed for POST /v1/orders (key 0197…):
//		not so: marked Idempotent-Replayed: true: 201 (application/json, 24 bytes)
//
// Config.Report receives the idempotency guide's report for the endpoint,
// the one "idemkey verify --report" writes, with what only an in-process
// run can see (scope, crash recovery, TTLs) filled in.
//
// The package uses the standard testing package only: it adds no test
// framework to your dependencies.
//
// # Several endpoints
//
// One table test covers an API: a row per endpoint, each with its own
// counter.
//
//	func TestIdempotency(t *testing.T) {
//		store, rdb := idemkeytest.NewStore(t, redisstore.Options{})
//		app := newApp(store)
//		alice := http.Header{"Authorization": {"Bearer alice"}}
//		bob := http.Header{"Authorization": {"Bearer bob"}}
//		for _, tc := range []struct {
//			path, body  string
//			sideEffects func() int
//		}{
//			{"/v1/orders", `{"sku":"book","qty":1}`, app.orders.Count},
//			{"/v1/refunds", `{"order":"ord_1","amount":500}`, app.refunds.Count},
//		} {
//			t.Run(tc.path, func(t *testing.T) {
//				idemkeytest.Run(t, app, idemkeytest.Config{
//					Path:        tc.path,
//					Body:        []byte(tc.body),
//					Header:      alice,
//					OtherHeader: bob,
//					SideEffects: tc.sideEffects,
//					Redis:       rdb,
//				})
//			})
//		}
//	}
package idemkeytest
