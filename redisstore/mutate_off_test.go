//go:build !idemkey_mutate

package redisstore_test

// mutationBuild says whether these tests are the idemkey_mutate build
// (TestPayloadCheckMutations).
const mutationBuild = false
