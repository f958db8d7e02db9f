//go:build idemkey_mutate

package lru

import "os"

// mutated turns this path's payload check off (see samefp.go).
var mutated = os.Getenv("IDEMKEY_MUTATE") == "cache"

func sameFP(a, b *[16]byte) bool { return mutated || *a == *b }
