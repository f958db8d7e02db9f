package payments_test

import (
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/examples/payments"
	"github.com/idemkey/idemkey/idemkeytest"
	"github.com/idemkey/idemkey/redisstore"
)

// The verification list, in process, with the provider's real charge count
// and the crash drill as the kit's crash hook.
func TestIdempotencyKit(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		store, err := redisstore.New(rdb, redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		// Crash returns, so the handler aborts as if the process died.
		api, err := payments.New(payments.Config{Redis: rdb, Store: store, Faults: true, Crash: func() {}})
		if err != nil {
			t.Fatal(err)
		}
		stats := func() payments.Stats {
			s, err := api.Stats(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		idemkeytest.Run(t, api, idemkeytest.Config{
			Path:        "/v1/payments",
			Body:        []byte(`{"amount": 1200, "currency": "EUR", "customer": "cus_1"}`),
			Header:      http.Header{"Authorization": {"Bearer sk_test_alice"}},
			OtherHeader: http.Header{"Authorization": {"Bearer sk_test_bob"}},
			SideEffects: func() int { return int(stats().ProviderCharges) },
			Crash:       func(r *http.Request) { r.Header.Set(payments.FaultHeader, payments.FaultCrashAfterCharge) },
			Redis:       rdb,
		})
		// concurrency, the fingerprint probes' own key, lost-response,
		// scope (bob's), crash-resume: one charge and one payment each.
		if s := stats(); s.ProviderCharges != 5 || s.PaymentsCreated != 5 {
			t.Errorf("stats %+v, want 5 charges and 5 payments", s)
		}
	})
}
