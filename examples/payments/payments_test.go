package payments_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/examples/payments"
	"github.com/idemkey/idemkey/ginmw"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode)
	os.Exit(m.Run())
}

// backends runs test against a private redis-server and against miniredis.
func backends(t *testing.T, test func(t *testing.T, rdb redis.UniversalClient)) {
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		test(t, srv.Client(t))
	})
	t.Run("miniredis", func(t *testing.T) {
		mr := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = rdb.Close() })
		test(t, rdb)
	})
}

// env is the API on a real loopback HTTP server.
type env struct {
	t     *testing.T
	api   *payments.API
	store *redisstore.Store
	srv   *httptest.Server
}

func newEnv(t *testing.T, rdb redis.UniversalClient, cfg payments.Config) *env {
	t.Helper()
	store, err := redisstore.New(rdb, redisstore.Options{Lease: 10 * time.Second})
	require.NoError(t, err)
	cfg.Redis, cfg.Store = rdb, store
	api, err := payments.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return &env{t: t, api: api, store: store, srv: srv}
}

type response struct {
	status int
	header http.Header
	body   string
}

// do sends a request; hdr holds "Name", "value" pairs.
func (e *env) do(method, path, body string, hdr ...string) (*response, error) {
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: string(b)}, nil
}

func (e *env) must(method, path, body string, hdr ...string) *response {
	e.t.Helper()
	r, err := e.do(method, path, body, hdr...)
	require.NoError(e.t, err)
	return r
}

// pay posts a payment as the caller with token.
func (e *env) pay(token, key, body string, hdr ...string) *response {
	e.t.Helper()
	return e.must(http.MethodPost, "/v1/payments", body, append([]string{"Authorization", "Bearer " + token, "Idempotency-Key", key}, hdr...)...)
}

func (e *env) stats() payments.Stats {
	e.t.Helper()
	r := e.must(http.MethodGet, "/v1/stats", "")
	require.Equal(e.t, http.StatusOK, r.status, r.body)
	var s payments.Stats
	require.NoError(e.t, json.Unmarshal([]byte(r.body), &s))
	direct, err := e.api.Stats(context.Background())
	require.NoError(e.t, err)
	require.Equal(e.t, direct, s)
	return s
}

func stats(created, charges, dedup int64) payments.Stats {
	return payments.Stats{PaymentsCreated: created, ProviderCharges: charges, ProviderDeduplicated: dedup}
}

func problemCode(t *testing.T, r *response) string {
	t.Helper()
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"), r.body)
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
		Code   string `json:"code"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.body), &p), r.body)
	require.Equal(t, r.status, p.Status)
	return p.Code
}

const body1 = `{"amount": 1200, "currency": "eur", "customer": "cus_1"}`

func TestCreateReplayAndRead(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		e := newEnv(t, rdb, payments.Config{})
		first := e.pay("alice", "k1", body1)
		require.Equal(t, http.StatusCreated, first.status, first.body)
		require.Empty(t, first.header.Get("Idempotent-Replayed"))
		var p payments.Payment
		require.NoError(t, json.Unmarshal([]byte(first.body), &p))
		require.Equal(t, int64(1200), p.Amount)
		require.Equal(t, "EUR", p.Currency)
		require.Equal(t, "cus_1", p.Customer)
		require.Equal(t, "succeeded", p.Status)
		require.True(t, strings.HasPrefix(p.ID, "pay_"), p.ID)
		require.True(t, strings.HasPrefix(p.Charge, "ch_"), p.Charge)
		require.Equal(t, "/v1/payments/"+p.ID, first.header.Get("Location"))

		// A retry, its JSON re-indented and reordered: the same request.
		again := e.pay("alice", "k1", `{"customer":"cus_1","currency":"eur",  "amount":1200}`)
		require.Equal(t, http.StatusCreated, again.status)
		require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
		require.Equal(t, first.body, again.body)
		require.Equal(t, first.header.Get("Location"), again.header.Get("Location"))

		got := e.must(http.MethodGet, first.header.Get("Location"), "", "Authorization", "Bearer alice")
		require.Equal(t, http.StatusOK, got.status)
		require.JSONEq(t, first.body, got.body)

		// Another caller cannot see it, and an unknown ID is 404 too.
		other := e.must(http.MethodGet, first.header.Get("Location"), "", "Authorization", "Bearer bob")
		require.Equal(t, http.StatusNotFound, other.status)
		require.Equal(t, "payment_not_found", problemCode(t, other))
		require.Equal(t, http.StatusNotFound, e.must(http.MethodGet, "/v1/payments/pay_nope", "", "Authorization", "Bearer alice").status)
		require.Equal(t, http.StatusUnauthorized, e.must(http.MethodGet, first.header.Get("Location"), "").status)

		// The same key from another caller is another payment.
		bob := e.pay("bob", "k1", body1)
		require.Equal(t, http.StatusCreated, bob.status)
		require.Empty(t, bob.header.Get("Idempotent-Replayed"))
		require.NotEqual(t, first.body, bob.body)

		// The key reused for another body: 422, nothing charged.
		reused := e.pay("alice", "k1", `{"amount": 999, "currency": "eur", "customer": "cus_1"}`)
		require.Equal(t, http.StatusUnprocessableEntity, reused.status)

		require.Equal(t, stats(2, 2, 0), e.stats())

		rec, err := e.store.Lookup(context.Background(), payments.Scope("alice"), "k1")
		require.NoError(t, err)
		require.Equal(t, redisstore.Completed, rec.State)
		require.Equal(t, http.StatusCreated, rec.Response.Code)
	})
}

func TestConcurrentDuplicatesChargeOnce(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		e := newEnv(t, rdb, payments.Config{ProviderLatency: 50 * time.Millisecond, Idempotency: ginmw.Options{Wait: 5 * time.Second}})
		const n = 16
		var wg sync.WaitGroup
		resps := make([]*response, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				resps[i], errs[i] = e.do(http.MethodPost, "/v1/payments", body1, "Authorization", "Bearer alice", "Idempotency-Key", "dup")
			})
		}
		wg.Wait()
		originals := 0
		for i := range n {
			require.NoError(t, errs[i])
			require.Equal(t, http.StatusCreated, resps[i].status, resps[i].body)
			require.Equal(t, resps[0].body, resps[i].body)
			if resps[i].header.Get("Idempotent-Replayed") == "" {
				originals++
			}
		}
		require.Equal(t, 1, originals)
		require.Equal(t, stats(1, 1, 0), e.stats())
	})
}

func TestDeterministicFailuresAreStored(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		e := newEnv(t, rdb, payments.Config{})
		for _, tc := range []struct {
			name, body, code string
			status           int
		}{
			{"zero amount", `{"amount": 0, "currency": "EUR", "customer": "cus_1"}`, "invalid_request", 400},
			{"fractional amount", `{"amount": 12.5, "currency": "EUR", "customer": "cus_1"}`, "invalid_request", 400},
			{"bad currency", `{"amount": 100, "currency": "EURO", "customer": "cus_1"}`, "invalid_request", 400},
			{"no customer", `{"amount": 100, "currency": "EUR"}`, "invalid_request", 400},
			{"not an object", `[1, 2]`, "invalid_request", 400},
			{"declined", `{"amount": 100, "currency": "EUR", "customer": "cus_declined"}`, "card_declined", 402},
		} {
			t.Run(tc.name, func(t *testing.T) {
				key := "fail-" + strings.ReplaceAll(tc.name, " ", "-")
				first := e.pay("alice", key, tc.body)
				require.Equal(t, tc.status, first.status, first.body)
				require.Equal(t, tc.code, problemCode(t, first))
				again := e.pay("alice", key, tc.body)
				require.Equal(t, tc.status, again.status)
				require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
				require.Equal(t, first.body, again.body)
			})
		}
		require.Equal(t, stats(0, 0, 0), e.stats())
	})
}

func TestRefusedBeforeAnyClaim(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		e := newEnv(t, rdb, payments.Config{Faults: true})
		for _, tc := range []struct {
			name   string
			status int
			hdr    []string
			body   string
		}{
			{"no credentials", 401, []string{"Idempotency-Key", "r1"}, body1},
			{"not a bearer", 401, []string{"Idempotency-Key", "r2", "Authorization", "Basic YTpi"}, body1},
			{"no key", 400, []string{"Authorization", "Bearer alice"}, body1},
			{"malformed json", 400, []string{"Authorization", "Bearer alice", "Idempotency-Key", "r3"}, `{"amount": 1200,`},
			{"unknown fault", 400, []string{"Authorization", "Bearer alice", "Idempotency-Key", "r4", payments.FaultHeader, "meteor"}, body1},
			// Two Idempotency-Key fields merged by an intermediary, as the
			// draft's compliance suite sends it.
			{"key with commas", 400, []string{"Authorization", "Bearer alice", "Idempotency-Key", "key,with,commas,longer-than-twenty-chars"}, body1},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := e.must(http.MethodPost, "/v1/payments", tc.body, tc.hdr...)
				require.Equal(t, tc.status, r.status, r.body)
				require.Empty(t, r.header.Get("Idempotent-Replayed"))
				if tc.status == 401 {
					require.Equal(t, "Bearer", r.header.Get("WWW-Authenticate"))
				}
				if tc.name == "key with commas" {
					require.Contains(t, r.body, `"type":"https://github.com/idemkey/idemkey/blob/main/docs/problems.md#key-malformed"`)
					require.Contains(t, r.body, `#section-2.1"`)
				}
			})
		}
		for _, key := range []string{"r1", "r2", "r3", "r4"} {
			_, err := e.store.Lookup(context.Background(), payments.Scope("alice"), key)
			require.ErrorIs(t, err, redisstore.ErrNotFound, key)
		}
		require.Equal(t, stats(0, 0, 0), e.stats())
	})
}

func TestProviderOutageReleasesTheKey(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		e := newEnv(t, rdb, payments.Config{Faults: true})
		down := e.pay("alice", "k-outage", body1, payments.FaultHeader, payments.FaultProviderUnavailable)
		require.Equal(t, http.StatusServiceUnavailable, down.status, down.body)
		require.Equal(t, "provider_unavailable", problemCode(t, down))
		require.Equal(t, "1", down.header.Get("Retry-After"))
		_, err := e.store.Lookup(context.Background(), payments.Scope("alice"), "k-outage")
		require.ErrorIs(t, err, redisstore.ErrNotFound)
		require.Equal(t, stats(0, 0, 0), e.stats())

		ok := e.pay("alice", "k-outage", body1)
		require.Equal(t, http.StatusCreated, ok.status, ok.body)
		require.Empty(t, ok.header.Get("Idempotent-Replayed"))
		require.Equal(t, stats(1, 1, 0), e.stats())
	})
}

func TestFaultHeaderIgnoredWhenFaultsAreOff(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		var crashes atomic.Int32
		e := newEnv(t, rdb, payments.Config{Crash: func() { crashes.Add(1) }})
		for _, f := range []string{payments.FaultCrashAfterCharge, payments.FaultProviderUnavailable, "meteor"} {
			r := e.pay("alice", "k-"+f, body1, payments.FaultHeader, f)
			require.Equal(t, http.StatusCreated, r.status, r.body)
		}
		require.Zero(t, crashes.Load())
		require.Equal(t, stats(3, 3, 0), e.stats())
	})
}

// A crash right after the charge: the next attempt resumes from the
// checkpoint and records the payment with the charge already made.
func TestCrashAfterChargeResumes(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		var crashes atomic.Int32
		e := newEnv(t, rdb, payments.Config{Faults: true, Crash: func() { crashes.Add(1) }})
		_, err := e.do(http.MethodPost, "/v1/payments", body1,
			"Authorization", "Bearer alice", "Idempotency-Key", "k-crash", payments.FaultHeader, payments.FaultCrashAfterCharge)
		require.Error(t, err, "a crashed attempt answers nothing")
		require.Equal(t, int32(1), crashes.Load())
		require.Equal(t, stats(0, 1, 0), e.stats())

		rec, err := e.store.Lookup(context.Background(), payments.Scope("alice"), "k-crash")
		require.NoError(t, err)
		require.Equal(t, redisstore.Released, rec.State, "the crashed run gave its lease back")
		require.Equal(t, payments.RecoveryCharged, rec.RecoveryPoint)
		var done payments.Charged
		require.NoError(t, json.Unmarshal(rec.RecoveryData, &done))

		// In-process, the aborted handler released its lease, so the retry
		// takes over at once; after a real crash it waits out the lease.
		r := e.pay("alice", "k-crash", body1)
		require.Equal(t, http.StatusCreated, r.status, r.body)
		require.Empty(t, r.header.Get("Idempotent-Replayed"))
		var p payments.Payment
		require.NoError(t, json.Unmarshal([]byte(r.body), &p))
		require.Equal(t, done.Charge.ID, p.Charge)
		require.Equal(t, done.PaymentID, p.ID)
		require.Equal(t, stats(1, 1, 0), e.stats())

		rec, err = e.store.Lookup(context.Background(), payments.Scope("alice"), "k-crash")
		require.NoError(t, err)
		require.Equal(t, redisstore.Completed, rec.State)
		require.Equal(t, 2, rec.Attempt)

		replay := e.pay("alice", "k-crash", body1)
		require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
		require.Equal(t, r.body, replay.body)
		require.Equal(t, stats(1, 1, 0), e.stats())
	})
}

// If our record of a charge is lost (a crash before the checkpoint), the
// provider's dedupe on the derived key still prevents a second charge.
func TestProviderDedupesOnTheDerivedKey(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		e := newEnv(t, rdb, payments.Config{})
		ctx := context.Background()
		// The key a first attempt derived before its record was lost.
		c, err := e.store.Claim(ctx, redisstore.Request{Scope: payments.Scope("alice"), Key: "k-lost"})
		require.NoError(t, err)
		key := c.Lease.DerivedKey("charge")
		require.NoError(t, c.Lease.Release(ctx))
		earlier, err := e.api.Provider().Charge(ctx, payments.ChargeRequest{IdempotencyKey: key, Amount: 1200, Currency: "EUR", Customer: "cus_1"})
		require.NoError(t, err)
		require.Equal(t, stats(0, 1, 0), e.stats())

		r := e.pay("alice", "k-lost", body1)
		require.Equal(t, http.StatusCreated, r.status, r.body)
		var p payments.Payment
		require.NoError(t, json.Unmarshal([]byte(r.body), &p))
		require.Equal(t, earlier.ID, p.Charge)
		require.Equal(t, stats(1, 1, 1), e.stats())

		_, err = e.api.Provider().Charge(ctx, payments.ChargeRequest{IdempotencyKey: key, Amount: 1, Currency: "EUR", Customer: "cus_1"})
		require.ErrorIs(t, err, payments.ErrProviderKeyReused)
	})
}

func TestProviderErrors(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	api, err := payments.New(payments.Config{Redis: rdb, ProviderLatency: time.Minute})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = api.Provider().Charge(ctx, payments.ChargeRequest{IdempotencyKey: "k", Amount: 1, Currency: "EUR", Customer: "c"})
	require.ErrorIs(t, err, payments.ErrProviderUnavailable, "a call cut short is an outage")

	_, err = payments.New(payments.Config{})
	require.Error(t, err)
	_, err = payments.New(payments.Config{Redis: rdb, Prefix: "idem:"})
	require.Error(t, err)
}

func TestScope(t *testing.T) {
	require.Equal(t, payments.Scope("a"), payments.Scope("a"))
	require.NotEqual(t, payments.Scope("a"), payments.Scope("b"))
	require.NotContains(t, payments.Scope("secret-token"), "secret")
}

func TestUnknownRoute(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	e := newEnv(t, rdb, payments.Config{})
	r := e.must(http.MethodGet, "/nope", "")
	require.Equal(t, http.StatusNotFound, r.status)
	require.Equal(t, "not_found", problemCode(t, r))
}
