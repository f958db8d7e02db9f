// Package redistest starts private redis-server processes for tests.
//
// Every server listens on a free port on 127.0.0.1, keeps its files in a
// directory from t.TempDir, runs without persistence unless the caller asks
// for it, and is killed when the test finishes (or, on Linux, when the test
// binary dies). The shared Redis on 127.0.0.1:6379 is never touched.
//
// Start starts a single server and StartCluster a Redis Cluster of masters
// only. Server offers Kill, Stop, Restart, Pause and Resume so tests can
// simulate crashes and hung servers.
//
// When redis-server is not on PATH the tests that need it are skipped; set
// IDEMKEY_REQUIRE_REDIS=1 to make that a failure instead (for CI).
package redistest
