package readmetest

// wallclockAllowed names the wall-clock assertions that may stay, by file
// and top-level function ("path Func", "path Type.Method"), each with the
// reason it is safe on a slow or loaded machine; docs/testing.md has the
// audit they come from. An entry that says "pending" is a known flake the
// audit decided to change, not yet changed.
var wallclockAllowed = map[string]string{
	// Lower bounds: a slow machine only makes the time longer, and each
	// start is taken before what it waits for begins.
	"internal/contracttest/interrupt.go runInterrupt":              "lower bound: start is taken before Shutdown is cancelled, so the grace always lies inside what is measured",
	"internal/faultproxy/proxy_test.go TestDelay":                  "lower bounds (a delayed round trip takes at least the delay), and one upper bound that is the behaviour: ten pipelined delays held once (d) not ten times (10d); the ceiling 5d leaves 4d (800ms) for ten INCRs on loopback, over 4x a loaded race build's",
	"grpcmw/shutdown_test.go TestShutdownGrace":                    "lower bound: stopped is taken before the shutdown begins, so the grace lies inside what is measured",
	"redisstore/internal/timers/timers_test.go TestQueueClockStep": "lower bound (a deadline fires no earlier than its distance on the monotonic clock); the hour-late case fails on recv's 10s. synctest cannot drive it: its fake clock has no monotonic reading for skew.Wall to keep",
	"internal/httpcore/deadline_test.go TestClockStep":             "lower bound (Done closes no earlier than the deadline's distance on the monotonic clock); the hour-late case fails on the 10s select. synctest cannot drive it: its fake clock has no monotonic reading for skew.Wall to keep",

	// Not a speed: the order of instants on one clock.
	"idemclient/key_test.go TestNewKeyIsAUUIDv7": "order, not speed: the key's millisecond lies between two readings of the clock taken around its minting",

	// Bounded polls and liveness guards: seconds for what takes
	// milliseconds; they fail only on a hang.
	"grpcmw/helpers_test.go eventually":                               "a bounded poll helper: every caller gives it 5s or more (grpcmw's crash and server tests)",
	"internal/faulttest/failover_test.go checkServes":                 "a bounded poll of 30s for service to resume after a failover, which takes seconds",
	"internal/redistest/cluster.go Cluster.Failover":                  "not an assertion: CLUSTER FAILOVER is sent again after manualFailoverRetry, inside a poll bounded by ctx",
	"redisstore/exactlyonce_test.go TestHeartbeatSurvivesOneHungBeat": "a bounded loop: duplicates are tried for lease+every (~3.4s) and the loop gives up after a minute only if no beat ever hung",

	// Owned by the refused-connection fix (another branch rewrites these
	// to assert the cause of the 503; their code is left alone here).

	// Pending changes of this audit (docs/testing.md).
	"internal/contracttest/contract.go run":                                    "4x, the bound is the behaviour: Timeout ends a request whose Redis is down or hung; the ceiling is 4 x (Timeout + 1s)",
	"internal/faulttest/failover_test.go TestClusterFailoverStorm":             "4x, the bound is the behaviour: an outage of 503s no longer than 20s, over 4x the 1-3s that CLUSTER FAILOVER takes",
	"internal/faulttest/failover_test.go failoverStorm.checkProbes":            "4x, the bounds are the behaviour: Timeout bounds a fresh key's 503, Timeout and the lease its 201; 2s and 4s of room",
	"internal/faulttest/failover_test.go sentinelFailoverStorm":                "4x, the bound is the behaviour: Timeout and Wait bound a 503; 4s of room",
	"internal/faulttest/hostile_test.go hostileBodies":                         "4x, the bound is the behaviour: BodyTimeout (300ms) ends a slow-loris body; 5s is 16x",
	"internal/faulttest/latency_test.go claimUnderBlackholeAndLatency":         "4x, the bound is the behaviour: Timeout (500ms) ends a claim Redis does not answer, with 2s of room (4x the 500ms a loaded race build needed), under the client's 3s ReadTimeout; and a lower bound (a delayed claim takes at least the delay)",
	"internal/faulttest/redis_faults_test.go redisRestartDuringStorm":          "4x: the premise (an outage shorter than the lease less 1s) with a 10s lease, 4x the 2.8s outage seen on a busy machine; the probe's 503 within 4x the middleware's 2s Timeout",
	"internal/faulttest/redis_faults_test.go redisRestartRetriedDuplicates":    "4x: the premise (an outage shorter than the lease less 1s) with a 10s lease, 4x the 2.8s outage seen on a busy machine",
	"redisstore/await_test.go TestAwait":                                       "4x, the bound is the behaviour: the deadline (200ms) ends a wait on an owner that never completes; 4 x (deadline + 1s). How soon a waiter is woken is bench/'s BenchmarkAwait",
	"redisstore/await_test.go TestAwaitRechecksRedisPastALocalLease":           "4x, the bound is the behaviour: the waiter asks Redis once the local lease (900ms) is over, not at its 8s deadline; 4 x (lease + 1s)",
	"redisstore/internal/wake/wake_test.go TestWakerStopDoesNotHoldTheWaiters": "4x, the bound is the behaviour: a Watch ends at its deadline (500ms) rather than wait for a reconnect that hangs until the test opens it; 4 x (deadline + 1s)",
	"redisstore/redis_test.go TestHungRedisHonoursDeadline":                    "4x, the bound is the behaviour: the deadline (300ms) ends a claim on a paused Redis; 4 x (deadline + 1s); the cause (DeadlineExceeded) is asserted too",
	"redisstore/replicas_test.go TestReplicas":                                 "4x, the bound is the behaviour: ReplicaTimeout (200ms) ends the wait for a hung replica, which would hold the claim until Resume; 5s; the cause (ErrNotReplicated, 0 of 1 acked) is asserted too",
	"redisstore/supervise_test.go TestSuperviseMaxDuration":                    "lower bound: started is taken before the claim, so MaxDuration lies inside what is measured",
	// Lower bounds (continued).
	"internal/loadgen/loadgen_test.go TestDurationAndUniqueSeq": "lower bound: a run of 150ms takes at least that (start is taken before Run)",

	// Times left, not times taken: a TTL or a lease's time left, which a
	// stall only shortens. Upper bounds on them are safe; each lower bound
	// leaves seconds (or 1.5s, 75% of the lease) for a stalled machine.
	"cmd/idemkey/e2e_test.go TestInspectShowsACompletedRecord":              "time left: a day's retention more than 23h on: an hour of room",
	"redisstore/exactlyonce_test.go TestRestartGraceIgnoresRetentionChange": "time left: an upper bound (a grace no longer than a lease), which a stall only makes easier",
	"redisstore/forget_test.go testForget":                                  "time left: more than 1s of the default 10s lease: 9s of room",
	"redisstore/forget_test.go TestForgetAfterRestart":                      "time left: more than 50 minutes of an hour's grace: 10 minutes of room",
	"redisstore/retention_test.go testRetention":                            "time left: an upper bound (the lease, not the retention), which a stall only makes easier",
	"redisstore/retention_test.go TestRequestRetentionRestartGrace":         "time left: more than 30s of a minute's grace (30s of room), and an upper bound",
	"redisstore/scan_test.go testScan":                                      "time left: more than 20s of the seeded 30s lease: 10s of room",
	"redisstore/store_test.go testStore":                                    "time left and a timestamp: an extended 2s lease has more than 500ms left (1.5s of room); TTLs under an upper bound; a record's CreatedAt within a minute of now, around a test of milliseconds",

	// Computed, not measured: no clock is read.
	"idemclient/policy_test.go TestBackoffIsExponentialWithFullJitter": "computed, not measured: backoffs drawn from a given random source, compared with their ceilings",

	// Liveness: a result's Elapsed far under the run's own length.
	"internal/loadgen/loadgen_test.go TestRequestErrorAborts":                                   "liveness: a run of 10s aborts at its third request (milliseconds); the bound is 5s",
	"internal/loadgen/loadgen_test.go TestCancel":                                               "liveness: a run of a minute ends with its 100ms context; the bound is 10s",
	"storm/storm_test.go TestRetryDelay":                                                        "computed, not measured: the delay a Retry-After gives, from a fixed now",
	"storm/features_test.go TestRetryStopsAtTimeout":                                            "4x, the bound is the behaviour: --timeout 400ms stops the retries of a server that only answers 503; 10s is 25x; the cause (every key inconclusive, 'no final answer') is asserted too",
	"storm/load_test.go TestLoadInterrupted":                                                    "liveness: a run of a minute ends when its context is cancelled; 30s is half the run; the cause (context.Canceled, Interrupted) is asserted too",
	"storm/internal/event/event_test.go TestRunnerRunsEachCommandAtItsTimeAndRecordsHowItEnded": "4x, the bound is the behaviour (a scheduled command starts at its time): 200ms, 4x the 50ms its author measured, with a comment; a lower bound (never before its time) too. New on main after the audit: under two CPU-bound loops beside others' builds a 200ms stall is possible; synctest cannot drive it (it runs a shell)",
	"storm/internal/event/event_test.go TestRunnerStopWaitsForARunningCommandWithinItsGrace":    "lower bound: a 'sleep 0.2' command runs at least 200ms",
	"storm/internal/hop/hop_test.go TestHTTPHopDelaysEveryRequestOfItsWindow":                   "lower bounds: a delayed request takes at least its delay (began is taken before the request)",
	"storm/internal/hop/tcp_test.go TestTCPHopHoldsEveryWriteOfItsWindowInOrder":                "lower bound: a held write arrives no sooner than its hold (began is taken before the write)",
}
