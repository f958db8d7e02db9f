//go:build idemkey_mutate

package lua

import (
	"os"
	"strings"
)

// The mutation check of the payload check on every path (redisstore's
// TestPayloadCheckMutations) builds with the idemkey_mutate tag and turns
// off one fingerprint comparison at a time with IDEMKEY_MUTATE: here the
// scripts' ("claim", "tombstone", "legacy"). A mutation that finds nothing
// to cut panics: it must never pass for lack of a target.
func init() {
	switch os.Getenv("IDEMKEY_MUTATE") {
	case "claim":
		Claim = cut(Claim, "if string.sub(v, 3, 18) ~= string.sub(ARGV[1], 3, 18) then return {4} end")
	case "tombstone":
		Claim = cut(Claim, "if math.floor(t / 262144) ~= ((b1 * 256 + b2) * 256 + b3) * 256 + b4 then return {4} end")
	case "legacy":
		Legacy = cut(Legacy, "if r[2] ~= ARGV[3] then return {4} end")
	}
}

func cut(src, s string) string {
	if !strings.Contains(src, s) {
		panic("lua: mutation: no " + s)
	}
	return strings.Replace(src, s, "", 1)
}
