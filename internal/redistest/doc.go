// Package redistest starts private redis-server processes for tests.
//
// Every server listens on a free port on 127.0.0.1, keeps its files in a
// directory from t.TempDir, runs without persistence unless the caller asks
// for it, and is killed when the test finishes (or, on Linux, when the test
// binary dies). The shared Redis on 127.0.0.1:6379 is never touched.
//
// Start starts a single server; StartCluster a Redis Cluster, of masters
// only or, with Replicas, of masters with replicas; StartSentinel a Sentinel
// deployment of one master, two replicas and three sentinels. Server offers
// Kill, Stop, Restart, Pause and Resume so tests can simulate crashes and
// hung servers; Cluster and Sentinel offer Failover (CLUSTER FAILOVER,
// SENTINEL FAILOVER) and KillMaster, which return once the new master serves.
// Each Start function has a Launch twin for programs outside tests.
//
// When redis-server is not on PATH the tests that need it are skipped; set
// IDEMKEY_REQUIRE_REDIS=1 to make that a failure instead (for CI).
//
// Long marks a long drill (a failover storm, the deploy drill, a pipelined
// copy of a fault test): it skips, saying how to run it, unless
// IDEMKEY_LONG=1, which .ci/run sets.
package redistest
