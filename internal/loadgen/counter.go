package loadgen

import "sync"

// ExecCounter counts a server's handler executions per idempotency key, the
// ground truth a storm's verdict is checked against. It is safe for
// concurrent use.
type ExecCounter struct {
	mu sync.Mutex
	m  map[string]int
}

// NewExecCounter returns an empty counter.
func NewExecCounter() *ExecCounter { return &ExecCounter{m: map[string]int{}} }

// Add counts one execution for key.
func (c *ExecCounter) Add(key string) {
	c.mu.Lock()
	c.m[key]++
	c.mu.Unlock()
}

// Summary returns the total number of executions, the number of distinct
// keys executed, the highest count for one key and the number of keys
// executed more than once.
func (c *ExecCounter) Summary() (total, keys, maxPerKey, multi int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.m {
		total += n
		keys++
		maxPerKey = max(maxPerKey, n)
		if n > 1 {
			multi++
		}
	}
	return total, keys, maxPerKey, multi
}
