package mcpmw_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/idemkey/idemkey/mcpmw"
)

// BenchmarkToolCall measures one tools/call over the in-memory transport
// on a real redis-server, side by side: a read-only tool (not guarded), a
// guarded first run with the default guard (which reads the annotations
// with a tools/list) and with Options.Tools, and a replay.
//
//	go -C mcpmw test -run '^$' -bench BenchmarkToolCall -benchtime 2000x .
func BenchmarkToolCall(b *testing.B) {
	for _, bc := range []struct {
		name  string
		opts  mcpmw.Options
		tool  string
		args  map[string]any
		fresh bool // a new key per call
	}{
		{"unguarded", mcpmw.Options{}, "lookup", nil, false},
		{"first/default-guard", mcpmw.Options{}, "send_email", ann("hello"), true},
		{"first/Options.Tools", mcpmw.Options{Tools: []string{"send_email"}}, "send_email", ann("hello"), true},
		{"replay", mcpmw.Options{Tools: []string{"send_email"}}, "send_email", ann("hello"), false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := start(b, inMemory, setup{server: bc.opts})
			cs := h.connect("alice")
			ctx := context.Background()
			if _, err := callTool(ctx, cs, bc.tool, "key-warm", bc.args); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				key := "key-warm"
				if bc.fresh {
					key = fmt.Sprintf("key-%d", i)
				}
				res, err := callTool(ctx, cs, bc.tool, key, bc.args)
				if err != nil || res.IsError {
					b.Fatal(err, text(res))
				}
			}
		})
	}
}
