// Package faulttest proves idemkey's promise on bad days: processes killed
// mid-request, Redis killed and restarted under load, a cluster master lost,
// hostile input, and one caller trying to reach another's records. It holds
// tests only; see the README's Reliability section for the table of cases.
package faulttest
