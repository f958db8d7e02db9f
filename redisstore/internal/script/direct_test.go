package script

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
)

// echo returns its keys and arguments, as Redis received them.
var echo = New("echo", "local r = {} for _, k in ipairs(KEYS) do r[#r+1] = k end for _, a in ipairs(ARGV) do r[#r+1] = a end return r", false)

// seen records the EVALSHA and EVAL commands a client's hooks see.
type seen struct {
	mu   sync.Mutex
	cmds [][]any
}

func (s *seen) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *seen) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			s.mu.Lock()
			s.cmds = append(s.cmds, cmd.Args())
			s.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (s *seen) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRunDirect: on a *redis.Client and a *redis.ClusterClient the runner
// builds the EVALSHA itself. Redis gets the keys and every kind of argument
// the store passes (strings, preboxed values, *string, *Bytes, small ints)
// as it would through go-redis's Script.Run, a server without the script
// gets EVAL, hooks see "evalsha" and the hash as strings, and a cluster
// routes by the key.
func TestRunDirect(t *testing.T) {
	ctx := context.Background()
	token := "tok\x00en"
	rec := Bytes("rec\xffbytes")
	var boxed any = "86400000"
	args := func() []any { return []any{&rec, &token, boxed, 7, "ttl"} }
	want := func(key string) []any {
		return []any{key, "rec\xffbytes", "tok\x00en", "86400000", "7", "ttl"}
	}

	t.Run("client", func(t *testing.T) {
		c := redistest.Start(t).Client(t)
		hooks := &seen{}
		c.AddHook(hooks)
		r, err := NewRunner(Config{Client: c})
		require.NoError(t, err)
		require.NotNil(t, r.direct)

		// A fresh server lacks the script: EVALSHA, then EVAL.
		reply, err := r.Run(ctx, echo, []string{"idem:{a}"}, nil, args()...)
		require.NoError(t, err)
		require.Equal(t, want("idem:{a}"), reply)
		reply, err = r.Run(ctx, echo, []string{"idem:{a}"}, nil, args()...)
		require.NoError(t, err)
		require.Equal(t, want("idem:{a}"), reply)

		hooks.mu.Lock()
		defer hooks.mu.Unlock()
		var names []any
		for _, cmd := range hooks.cmds {
			names = append(names, cmd[0])
		}
		require.Equal(t, []any{"evalsha", "eval", "evalsha"}, names)
		require.Equal(t, echo.Hash(), hooks.cmds[0][1], "a hook reads the hash as a string")
		require.Equal(t, echo.Source, hooks.cmds[1][1])
		require.Equal(t, "idem:{a}", hooks.cmds[2][3], "a hook reads the key as a string")
	})

	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		c := cl.Client(t)
		r, err := NewRunner(Config{Client: c})
		require.NoError(t, err)
		require.NotNil(t, r.direct)
		for i := range 20 { // keys in slots of every master
			key := fmt.Sprintf("idem:{%d}", i)
			reply, err := r.Run(ctx, echo, []string{key}, nil, args()...)
			require.NoError(t, err, key) // a wrong node would answer MOVED, followed, or CROSSSLOT
			require.Equal(t, want(key), reply)
		}
	})
}

// TestRunDirectAllocs: a call on a *redis.Client costs the command and its
// one argument slice, plus what go-redis allocates itself, whatever the
// arguments: Run keeps no slice of the caller's.
func TestRunDirectAllocs(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	r, err := NewRunner(Config{Client: c})
	require.NoError(t, err)
	keys := []string{"idem:{a}"}
	rec := Bytes("rec")
	var ms any = "1000"
	_, err = r.Run(ctx, echo, keys, nil, &rec, ms) // loads the script
	require.NoError(t, err)
	direct := testing.AllocsPerRun(200, func() {
		if _, err := r.Run(ctx, echo, keys, nil, &rec, ms); err != nil {
			t.Fatal(err)
		}
	})
	viaScript := testing.AllocsPerRun(200, func() {
		if err := echo.Run(ctx, c, keys, &rec, ms).Err(); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("allocations per call: runner %.1f, go-redis Script.Run %.1f", direct, viaScript)
	require.LessOrEqual(t, direct, viaScript-2, "the runner saves go-redis's copies of the arguments")
}
