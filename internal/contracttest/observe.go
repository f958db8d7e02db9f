package contracttest

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/observe"
)

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu     sync.Mutex
	events []observe.Event
	calls  map[string]int
}

func (r *recorder) Event(_ context.Context, e *observe.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, *e)
}

func (r *recorder) Redis(_ context.Context, c *observe.Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[string]int{}
	}
	r.calls[c.Script]++
}

// take returns the kinds reported since the last take.
func (r *recorder) take() ([]observe.Kind, []observe.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var kinds []observe.Kind
	for _, e := range r.events {
		kinds = append(kinds, e.Kind)
	}
	evs := r.events
	r.events = nil
	return kinds, evs
}

func runObserve(t *testing.T, mount Mount, b backend) {
	t.Run("the observer sees every decision, with the route and a keyed hash, never the key", func(t *testing.T) {
		obs := &recorder{}
		e := newEnv(t, b, mount, envConfig{store: storeOptions(obs)})
		key := newKey()
		pay := req{key: key, body: `{"a":1}`}

		require.Equal(t, http.StatusCreated, e.do(pay).status)
		kinds, evs := obs.take()
		require.Equal(t, []observe.Kind{observe.Claimed, observe.Completed}, kinds)
		require.Equal(t, 1, evs[0].Attempt)
		require.Equal(t, http.StatusCreated, evs[1].Status)
		require.Contains(t, evs[0].Route, "POST ")
		h := evs[0].KeyHash([]byte("secret"))
		require.Len(t, h, 22)
		require.Equal(t, h, evs[1].KeyHash([]byte("secret")), "one key, one hash")
		require.NotEqual(t, h, evs[1].KeyHash([]byte("other secret")))
		require.NotContains(t, h, key)

		e.do(pay)
		kinds, _ = obs.take()
		require.Equal(t, []observe.Kind{observe.Replayed}, kinds)

		e.do(req{key: key, body: `{"a":2}`})
		kinds, evs = obs.take()
		require.Equal(t, []observe.Kind{observe.Mismatch}, kinds)
		require.Equal(t, "key-reused", evs[0].Problem)

		e.do(req{key: newKey(), path: "/status/503"})
		kinds, _ = obs.take()
		require.Equal(t, []observe.Kind{observe.Claimed, observe.Released}, kinds)

		e.do(req{noKey: true, body: `{}`})
		kinds, evs = obs.take()
		require.Equal(t, []observe.Kind{observe.Rejected}, kinds)
		require.Equal(t, "key-missing", evs[0].Problem)

		obs.mu.Lock()
		defer obs.mu.Unlock()
		require.Positive(t, obs.calls["claim"])
		require.Positive(t, obs.calls["complete"])
		require.Positive(t, obs.calls["release"])
	})
}
