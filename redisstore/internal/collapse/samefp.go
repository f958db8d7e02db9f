//go:build !idemkey_mutate

package collapse

// sameFP reports whether two fingerprints are the same: the payload check
// of this fast path. Built with the idemkey_mutate tag, IDEMKEY_MUTATE=collapse
// turns it off, for the mutation check of the payload check on every path
// (redisstore's TestPayloadCheckMutations); mutate.go has that build.
func sameFP(a, b *[16]byte) bool { return *a == *b }
