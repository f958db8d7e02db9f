// Package faulttest proves idemkey's promise on bad days: processes killed
// mid-request, Redis killed and restarted under load, a cluster master lost,
// Sentinel and cluster failovers under a retry storm, latency and blackholes
// through a fault proxy, hostile input, and one caller trying to reach
// another's records. It holds tests only; see the README's Reliability
// section and docs/failover.md for the table of cases. TestXPipelined is
// TestX with the store on the client's auto-pipeliner (app_test.go, via).
//
// The long drills run only with IDEMKEY_LONG=1 (.ci/run sets it; see
// redistest.Long): every TestXPipelined, the Sentinel failover storms, the
// cluster storm whose master is killed, and TestClusterMasterLost. The
// default run keeps one of each family: the process crashes, the cluster
// storm across CLUSTER FAILOVER, the hostile input, latency and blackholes,
// Redis restarted under a storm, replica acknowledgement, and the store's
// health.
//
// IDEMKEY_FAILOVER_KEYS=n (with IDEMKEY_LONG=1) runs the failover storms
// with n keys (1,000 by default) and the cases CI leaves out;
// IDEMKEY_KNOWN_HOLES=1 runs the tests of known holes, which fail.
package faulttest
