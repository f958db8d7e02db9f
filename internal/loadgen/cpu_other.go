//go:build !unix

package loadgen

import "time"

// ProcessCPU returns 0: CPU time is not measured on this platform.
func ProcessCPU() time.Duration { return 0 }
