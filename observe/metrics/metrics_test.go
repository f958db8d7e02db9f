package metrics

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/observe"
)

func TestKinds(t *testing.T) {
	for _, tc := range []struct {
		kind     observe.Kind
		outcome  string
		lease    int
		decision string
	}{
		{observe.Claimed, "", 1, "claimed"},
		{observe.TookOver, "", 1, "took_over"},
		{observe.Completed, "executed", -1, "completed"},
		{observe.Released, "released", -1, "released"},
		{observe.Fenced, "executed", -1, "fenced"},
		{observe.NotStored, "executed", -1, "not_stored"},
		{observe.Replayed, "replayed", 0, "replayed"},
		{observe.InProgress, "in_progress", 0, "in_progress"},
		{observe.Mismatch, "mismatch", 0, "mismatch"},
		{observe.Expired, "expired", 0, "expired"},
		{observe.Unavailable, "unavailable", 0, "unavailable"},
		{observe.FailOpen, "fail_open", 0, "fail_open"},
		{observe.Rejected, "rejected", 0, "rejected"},
		{observe.Forgotten, "", 0, "forgotten"}, // an operator's, not a request's: not counted
		{0, "", 0, "unknown"},
		{observe.Forgotten + 1, "", 0, "unknown"},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			require.Equal(t, tc.outcome, Outcome(tc.kind))
			require.Equal(t, tc.lease, LeaseDelta(tc.kind))
			require.Equal(t, tc.decision, Decision(tc.kind))
		})
	}
}

func TestTable(t *testing.T) {
	var last string
	for _, m := range All {
		require.Greater(t, m.Name, last, "All is in name order")
		last = m.Name
		require.True(t, strings.HasPrefix(m.Name, "idemkey_"))
		require.NotEmpty(t, m.Help)
		require.NotEmpty(t, m.OTel)
		require.NotEmpty(t, m.Unit)
	}
	require.IsIncreasing(t, RedisBuckets)
}

func TestRoutes(t *testing.T) {
	r := NewRoutes(3)
	require.Equal(t, "POST /a", r.Label("POST /a"))
	require.Equal(t, "POST /\uFFFD", r.Label("POST /\xff"))
	require.Equal(t, "POST /a", r.Label("POST /a"), "a value seen before is not counted again")
	require.Equal(t, "POST /b", r.Label("POST /b"))
	require.Equal(t, OtherRoute, r.Label("POST /c"), "past the limit")
	require.Equal(t, OtherRoute, r.Label("POST /c\xfe"))
	require.Equal(t, "POST /b", r.Label("POST /b"), "values seen before keep their label")
	require.Equal(t, "POST /\uFFFD", r.Label("POST /\xfe\xfd"), "invalid bytes fold into one value")
	require.Equal(t, int64(DefaultMaxRoutes), NewRoutes(0).max)
}

// Many goroutines, many routes: never more than the limit, and every value
// seen once keeps its label.
func TestRoutesConcurrent(t *testing.T) {
	r := NewRoutes(100)
	var wg sync.WaitGroup
	labels := make([]map[string]string, 8)
	for g := range labels {
		labels[g] = map[string]string{}
		wg.Go(func() {
			for i := range 1000 {
				route := fmt.Sprintf("POST /%d", (i*7+g)%300)
				labels[g][route] = r.Label(route)
			}
		})
	}
	wg.Wait()
	kept := map[string]bool{}
	for _, m := range labels {
		for route, l := range m {
			if l != OtherRoute {
				require.Equal(t, route, l)
				kept[l] = true
			}
		}
	}
	require.Len(t, kept, 100)
	for route := range kept {
		require.Equal(t, route, r.Label(route))
	}
}
