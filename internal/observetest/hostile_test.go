package observetest

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/observe"
)

// Regression: an observer that panics broke the request it
// observed (the client got EOF instead of the stored answer, on every
// retry) and, on a takeover, leaked the heartbeat for ever. Now whatever an
// observer does, requests and Store.Do behave as if nobody observed.
func TestHostileWithAPanickingObserver(t *testing.T) {
	var panics atomic.Int64
	boom := func() { panics.Add(1); panic("observetest: the observer panics") }
	Hostile(t, Config{Observer: observe.Func{
		OnEvent: func(context.Context, *observe.Event) { boom() },
		OnRedis: func(context.Context, *observe.Call) { boom() },
	}})
	require.Positive(t, panics.Load())
}
