// Package bench measures what idemkey costs per request and whether it holds
// under a retry storm, with figures anyone can reproduce.
//
// Two entry points:
//
//   - Go benchmarks of the store and of the Gin contenders against a private
//     redis-server and miniredis: go -C bench test . -bench . -run '^$'.
//   - The scenario runner, go -C bench run ./cmd/storm-bench, which calls Run:
//     it serves three Gin contenders on loopback (bare, limit, ours), drives
//     them with keep-alive clients in turn for several rounds, counts Redis
//     round trips, commands and memory on the server, storms ours on a
//     single node, on two instances and on a cluster, runs cmd/peers
//     (package peers), and writes bench/RESULTS.md.
//
// The package is in the bench module, not in idemkey's: nothing here is
// idemkey's API. See bench/README.md for what each figure means and how it
// is made.
package bench
