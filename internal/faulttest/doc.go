// Package faulttest proves idemkey's promise on bad days: processes killed
// mid-request, Redis killed and restarted under load, a cluster master lost,
// Sentinel and cluster failovers under a retry storm, latency and blackholes
// through a fault proxy, hostile input, and one caller trying to reach
// another's records. It holds tests only; see the README's Reliability
// section and docs/failover.md for the table of cases. TestXPipelined is
// TestX with the store on the client's auto-pipeliner (app_test.go, via).
//
// IDEMKEY_FAILOVER_KEYS=n runs the failover storms with n keys (1,000 by
// default) and the cases CI leaves out; IDEMKEY_KNOWN_HOLES=1 runs the tests
// of known holes, which fail.
package faulttest
