// Package bench measures what idemkey costs per request and whether it holds
// under a retry storm, with figures anyone can reproduce.
//
// Two entry points:
//
//   - Go benchmarks of the store and of the Gin contenders against a private
//     redis-server and miniredis: go -C bench test . -bench . -run '^$'.
//   - The scenario runner, go -C bench run ./cmd/storm-bench, which calls Run:
//     it serves Gin contenders on loopback (bare, floor, limit,
//     limit-pipelined, ours, ours-pipelined; see contenders.go), drives them
//     with keep-alive clients in turn for several rounds, measures CPU per
//     request in the runner and in redis-server, counts Redis round trips,
//     commands, Go allocations and memory, storms every contender on a
//     single node and ours' variants on two instances and on a cluster, runs
//     cmd/peers (package peers), and writes bench/RESULTS.md.
//
// The package is in the bench module, not in idemkey's: nothing here is
// idemkey's API. See bench/README.md for what each figure means and how it
// is made.
package bench
