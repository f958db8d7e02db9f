package payments_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/examples/payments"
)

// The drop-response drill: the payment is made and its outcome stored, the
// connection closes without an answer, and a retry (still asking for the
// drill) gets the stored answer.
func TestDropResponseStoresThenDrops(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		e := newEnv(t, rdb, payments.Config{Faults: true})
		hdr := []string{"Authorization", "Bearer alice", "Idempotency-Key", "k-drop", payments.FaultHeader, payments.FaultDropResponse}
		_, err := e.do(http.MethodPost, "/v1/payments", body1, hdr...)
		require.Error(t, err, "no answer: the connection was closed")
		require.Equal(t, stats(1, 1, 0), e.stats(), "the work is done")
		rec, err := e.store.Lookup(context.Background(), payments.Scope("alice"), "k-drop")
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, rec.Response.Code, "and its outcome stored before the drop")

		for range 2 {
			r, err := e.do(http.MethodPost, "/v1/payments", body1, hdr...)
			require.NoError(t, err, "a replay is answered")
			require.Equal(t, http.StatusCreated, r.status, r.body)
			require.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
		}
		require.Equal(t, stats(1, 1, 0), e.stats())

		// Refusals are answered too.
		r := e.must(http.MethodPost, "/v1/payments", `{"amount":`, "Authorization", "Bearer alice", "Idempotency-Key", "k-bad-json", payments.FaultHeader, payments.FaultDropResponse)
		require.Equal(t, http.StatusBadRequest, r.status)
		r = e.must(http.MethodPost, "/v1/payments", body1, "Authorization", "Bearer alice", "Idempotency-Key", "k-drop", payments.FaultHeader, "meteor")
		require.Equal(t, "unknown_fault", problemCode(t, r))
		require.Contains(t, r.body, payments.FaultDropResponse)
	})
}
