package hop

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseFaultReadsTheFlagsSyntax(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Fault
	}{
		{"provider at=5s for=10s latency=200ms", Fault{Hop: "provider", Window: Window{At: 5 * time.Second, For: 10 * time.Second, Latency: 200 * time.Millisecond}}},
		{"provider at=0s for=1m30s latency=100ms..400ms", Fault{Hop: "provider", Window: Window{For: 90 * time.Second, Latency: 100 * time.Millisecond, LatencyMax: 400 * time.Millisecond}}},
		{"provider at=1s for=2s latency=50ms..50ms", Fault{Hop: "provider", Window: Window{At: time.Second, For: 2 * time.Second, Latency: 50 * time.Millisecond}}},
		{"p at=1s for=2s errors=50%", Fault{Hop: "p", Window: Window{At: time.Second, For: 2 * time.Second, Errors: 0.5, Status: 503}}},
		{"p at=1s for=2s errors=12.5%:500", Fault{Hop: "p", Window: Window{At: time.Second, For: 2 * time.Second, Errors: 0.125, Status: 500}}},
		{"p at=1s for=2s errors=100%:429 latency=1s", Fault{Hop: "p", Window: Window{At: time.Second, For: 2 * time.Second, Errors: 1, Status: 429, Latency: time.Second}}},
		{"  redis.main   for=5s  at=2s   down ", Fault{Hop: "redis.main", Window: Window{At: 2 * time.Second, For: 5 * time.Second, Down: true}}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			f, err := ParseFault(tc.in)
			require.NoError(t, err)
			require.Equal(t, tc.want, f)
			again, err := ParseFault(f.String())
			require.NoError(t, err, "String writes what ParseFault reads: %s", f)
			require.Equal(t, f, again)
		})
	}
}

func TestParseFaultSaysWhatIsWrong(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "want NAME at=D"},
		{"at=1s for=2s down", "start with the hop's name"},
		{"p!x at=1s for=2s down", "use letters, digits"},
		{"p for=2s down", "at=D is missing"},
		{"p at=1s down", "for=D is missing"},
		{"p at=1s for=2s", "the window does nothing"},
		{"p at=5 for=2s down", "missing unit (5s, 5ms)"},
		{"p at=soon for=2s down", "want a duration"},
		{"p at=-1s for=2s down", "at= must not be negative"},
		{"p at=1s for=0s down", "for= must be positive"},
		{"p at=1s for=2s latency=300ms..100ms", "upside down"},
		{"p at=1s for=2s latency=-5ms", "must not be negative"},
		{"p at=1s for=2s errors=50", "want a percentage"},
		{"p at=1s for=2s errors=0%", "from 0.01% to 100%"},
		{"p at=1s for=2s errors=101%", "from 0.01% to 100%"},
		{"p at=1s for=2s errors=0.001%", "up to two decimals"},
		{"p at=1s for=2s errors=50%:99", "want 200 to 599"},
		{"p at=1s for=2s errors=50%:abc", "want 200 to 599"},
		{"p at=1s for=2s down latency=1s", "down refuses every connection"},
		{"p at=1s for=2s down=yes", "down takes no value"},
		{"p at=1s at=2s for=2s down", "at given twice"},
		{"p at=1s for=2s jitter=5ms", `unknown "jitter"`},
		{"p at=1s for=2s latency", "want key=value"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, err := ParseFault(tc.in)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "--fault", "the error names the flag")
		})
	}
}

func TestParseProxyAndTCPProxy(t *testing.T) {
	s, err := ParseProxy("provider=127.0.0.1:9001,http://127.0.0.1:8081/v1")
	require.NoError(t, err)
	require.Equal(t, Spec{Name: "provider", Kind: HTTP, Listen: "127.0.0.1:9001", Upstream: "http://127.0.0.1:8081/v1"}, s)
	require.Equal(t, "provider=127.0.0.1:9001,http://127.0.0.1:8081/v1", s.String())

	s, err = ParseProxy("provider=:0,https://api.example.com")
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:0", s.Listen, "no host means loopback")

	s, err = ParseTCPProxy("redis=[::1]:7001,127.0.0.1:6379")
	require.NoError(t, err)
	require.Equal(t, Spec{Name: "redis", Kind: TCP, Listen: "[::1]:7001", Upstream: "127.0.0.1:6379"}, s)
	s, err = ParseTCPProxy("redis=localhost:7001,redis.internal:6379")
	require.NoError(t, err)
	require.Equal(t, "localhost:7001", s.Listen)

	for _, tc := range []struct{ in, want string }{
		{"provider", "want NAME=LISTEN,UPSTREAM"},
		{"=127.0.0.1:1,http://x", "empty hop name"},
		{"provider=127.0.0.1:9001", "no comma"},
		{"provider=0.0.0.0:9001,http://127.0.0.1:8081", "loopback only"},
		{"provider=10.0.0.1:9001,http://127.0.0.1:8081", "loopback only"},
		{"provider=example.com:9001,http://127.0.0.1:8081", "loopback only"},
		{"provider=127.0.0.1,http://127.0.0.1:8081", "want host:port"},
		{"provider=127.0.0.1:99999,http://127.0.0.1:8081", "bad port"},
		{"provider=127.0.0.1:9001,127.0.0.1:8081", "want an http:// or https:// URL"},
		{"provider=127.0.0.1:9001,ftp://127.0.0.1:8081", "want an http:// or https:// URL"},
		{"provider=127.0.0.1:9001,http://", "no host"},
		{"provider=127.0.0.1:9001,http://127.0.0.1:8081/?a=1", "query or fragment"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, err := ParseProxy(tc.in)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "--proxy")
		})
	}
	for _, tc := range []struct{ in, want string }{
		{"redis=127.0.0.1:7001,127.0.0.1", "want host:port"},
		{"redis=127.0.0.1:7001,:6379", "want host:port"},
		{"redis=127.0.0.1:7001,127.0.0.1:0", "bad port"},
		{"redis=192.168.1.1:7001,127.0.0.1:6379", "loopback only"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, err := ParseTCPProxy(tc.in)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "--tcp-proxy")
		})
	}
}
