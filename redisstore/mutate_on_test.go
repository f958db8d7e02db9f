//go:build idemkey_mutate

package redisstore_test

const mutationBuild = true
