package check

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The check's pure parts; Run itself is tested through redisstore's Check
// on real servers (redisstore/check_test.go).

func TestParseInfo(t *testing.T) {
	got := parseInfo("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n\r\n# Replication\r\nslave0:ip=127.0.0.1,port=1,state=online\r\n")
	require.Equal(t, map[string]string{"redis_version": "7.0.15", "redis_mode": "standalone",
		"slave0": "ip=127.0.0.1,port=1,state=online"}, got)
}

func TestSizeString(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 64 << 20: "64.0 MiB", 3 << 30: "3.0 GiB"} {
		require.Equal(t, want, sizeString(n), n)
	}
}

func TestEvicts(t *testing.T) {
	require.False(t, evicts("noeviction"))
	for _, p := range []string{"allkeys-lru", "volatile-ttl", "volatile-lfu", "allkeys-random"} {
		require.True(t, evicts(p), p)
	}
}

func TestVersion(t *testing.T) {
	n := func(info map[string]string) node { return node{addr: "a", info: info} }
	require.Equal(t, Result{Version, OK, "Redis 7.2.4 (standalone)"}, version([]node{n(map[string]string{"redis_version": "7.2.4", "redis_mode": "standalone"})}))
	r := version([]node{n(map[string]string{"redis_version": "6.2.1", "redis_mode": "standalone"})})
	require.Equal(t, Fail, r.Status)
	require.Contains(t, r.Message, "need Redis 7.0 or newer")
	r = version([]node{n(map[string]string{"redis_version": "7.2.4", "redis_mode": "sentinel"})})
	require.Equal(t, Fail, r.Status)
	require.Contains(t, r.Message, "this is a Sentinel")
	require.Equal(t, Result{Version, OK, "Valkey 8.0.1 (standalone)"}, version([]node{n(map[string]string{"redis_version": "7.2.4",
		"server_name": "valkey", "valkey_version": "8.0.1", "redis_mode": "standalone"})}))
}
