package observe

import (
	"context"
	"github.com/idemkey/idemkey/internal/syncbuf"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestLabel(t *testing.T) {
	long := strings.Repeat("é", MaxLabelLen) // 2 bytes each
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"POST /v1/payments/{id}", "POST /v1/payments/{id}"},
		{"POST /\xff", "POST /\uFFFD"},
		{"send \xff\xfe!", "send \uFFFD!"},
		{strings.Repeat("a", MaxLabelLen), strings.Repeat("a", MaxLabelLen)},
		{strings.Repeat("a", MaxLabelLen+1), strings.Repeat("a", MaxLabelLen)},
		{"a" + long, "a" + long[:MaxLabelLen-2]}, // cut before a character, not inside one
	} {
		got := Label(tc.in)
		require.Equal(t, tc.want, got, "%q", tc.in)
		require.True(t, utf8.ValidString(got))
		require.LessOrEqual(t, len(got), MaxLabelLen)
	}
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = Label("POST /v1/payments/{id}") }))
}

// logTo sends slog.Default to a buffer for the test.
func logTo(t *testing.T) *syncBuffer {
	b := &syncBuffer{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(b, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return b
}

type syncBuffer = syncbuf.Buffer

func TestSafe(t *testing.T) {
	require.Nil(t, Safe(nil))
	var routes []string
	inner := Func{OnEvent: func(_ context.Context, e *Event) {
		routes = append(routes, e.Route)
		if e.Kind == Rejected {
			panic("boom")
		}
	}, OnRedis: func(context.Context, *Call) { panic("redis boom") }}
	s := Safe(inner)
	require.Same(t, s, Safe(s), "wrapping twice is wrapping once")

	logs := logTo(t)
	ctx := context.Background()
	e := NewEvent(Completed, "scope", "key")
	e.Route = "POST /\xff"
	s.Event(ctx, &e)
	for range 10 {
		e.Kind = Rejected
		s.Event(ctx, &e) // panics inside: contained
		s.Redis(ctx, &Call{Script: "claim"})
	}
	require.Equal(t, "POST /\uFFFD", routes[0], "the observer sees a route fit for a label")
	require.Len(t, routes, 11)
	out := logs.String()
	require.Equal(t, 1, strings.Count(out, "the observer panicked"), "one line a minute, not one per panic:\n%s", out)
	require.Contains(t, out, "panic=boom")
	require.Contains(t, out, "method=Event")
}

// A Safe observer used from many goroutines: every panic contained.
func TestSafeConcurrent(t *testing.T) {
	logTo(t)
	s := Safe(Func{OnEvent: func(context.Context, *Event) { panic("boom") }})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				e := NewEvent(Claimed, "", "k")
				s.Event(context.Background(), &e)
				s.Redis(context.Background(), &Call{})
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 800, s.(*safe).panics.Load())
}
