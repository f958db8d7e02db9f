// Package peers benchmarks the most-used Go idempotency middleware, the one
// of gofiber/fiber v3 (middleware/idempotency) with gofiber/storage's Redis
// storage, so that idemkey's figures can be read beside a peer's.
//
// Run measures first-execution throughput of a bare fiber handler and of the
// same handler behind the middleware (alternating them for several rounds),
// replay throughput, and the outcome of a retry storm (storm)
// against one and against two app instances sharing the same Redis.
// Results is its output, and its JSON form is what the command
// (go -C bench run ./cmd/peers -json) prints and the storm-bench runner
// reads. See README.md for what was found in fiber's middleware.
package peers
