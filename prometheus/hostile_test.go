package prometheus

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/observetest"
	"github.com/idemkey/idemkey/observe"
)

// Regression: POST /%FF panicked this observer (a label value
// that is not valid UTF-8), so the stored answer never reached the client
// and a takeover's heartbeat was leaked; and every distinct path was a
// series of its own. Now every request gets its answer, and the route label
// takes a bounded set of valid values.
func TestHostilePaths(t *testing.T) {
	reg := prom.NewRegistry()
	obs, err := New(Options{Registerer: reg})
	require.NoError(t, err)
	observetest.Hostile(t, observetest.Config{Observer: obs})

	got := snapshot(t, reg)
	routes := map[string]bool{}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				require.True(t, utf8.ValidString(l.GetValue()), "%s: label %s=%q", mf.GetName(), l.GetName(), l.GetValue())
				if l.GetName() == "route" {
					routes[l.GetValue()] = true
				}
			}
		}
	}
	do := strings.ToValidUTF8(observetest.BadLabel, "\uFFFD")
	require.Equal(t, map[string]bool{observetest.UnmatchedRoute: true, observetest.ItemsRoute: true, do: true}, routes)
	unmatched := observetest.UnmatchedRoute
	for series, want := range map[string]float64{
		// /%FF, its takeover, the stalled run (fenced), the distinct paths
		requests(unmatched, "executed"):                      3 + observetest.HostilePaths,
		requests(unmatched, "replayed"):                      3,
		`idemkey_takeovers_total{route="` + unmatched + `"}`: 1,
		`idemkey_fenced_total{route="` + unmatched + `"}`:    1,
		requests(observetest.ItemsRoute, "executed"):         observetest.ItemPaths,
		requests(do, "executed"):                             2,
		requests(do, "replayed"):                             1,
		`idemkey_takeovers_total{route="` + do + `"}`:        1,
		leases: 0,
	} {
		require.Equal(t, want, got[series], series)
	}
}

// Past MaxRoutes distinct routes, every new one counts as "other"; Route's
// results are bounded too.
func TestMaxRoutes(t *testing.T) {
	_, err := New(Options{Registerer: prom.NewRegistry(), MaxRoutes: -1})
	require.ErrorContains(t, err, "MaxRoutes")

	reg := prom.NewRegistry()
	o, err := New(Options{Registerer: reg, MaxRoutes: 2, Route: func(r string) string { return r + "\xff" }})
	require.NoError(t, err)
	for _, r := range []string{"a", "b", "c", "d", "a"} {
		e := observe.NewEvent(observe.Completed, "", "k")
		e.Route = r
		o.Event(context.Background(), &e)
	}
	require.Equal(t, map[string]float64{requests("a\uFFFD", "executed"): 2, requests("b\uFFFD", "executed"): 1,
		requests("other", "executed"): 2, leases: -5}, snapshot(t, reg))
}
