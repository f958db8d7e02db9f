package hop_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/idemclient"
	"github.com/idemkey/idemkey/storm/internal/hop"
)

// Retries multiply across layers (the SRE book, "Addressing Cascading
// Failures"): three layers that each make 4 attempts put 4³ = 64 attempts
// on a failing backend for every request at the top. A retry budget at
// every layer keeps each layer's retries to a share of its own requests,
// and the product stays under 2.
func TestLayeredRetriesMultiplyUnlessEachLayerHasABudget(t *testing.T) {
	for _, tc := range []struct {
		policy string
		ops    int
		check  func(t *testing.T, perOp float64)
	}{
		{idemclient.RetryNaive, 20, func(t *testing.T, perOp float64) {
			require.InEpsilon(t, 64, perOp, 0.10, "4 attempts at each of 3 layers")
		}},
		// Each layer's budget has spent its floor (10 retries a second,
		// 100 in its 10 s window) first, as it has a few seconds into a
		// real outage; what is left is the ratio: each layer retries a
		// fifth of its own requests, 1.2³ = 1.73 attempts at the bottom.
		{idemclient.RetryBudget, 300, func(t *testing.T, perOp float64) {
			require.Less(t, perOp, 2.0)
			require.Greater(t, perOp, 1.2, "each layer retried within its budget")
		}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			var bottom atomic.Int64
			backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				bottom.Add(1)
				_, _ = io.Copy(io.Discard, r.Body)
				w.WriteHeader(http.StatusServiceUnavailable)
			}))
			backend.Config.ErrorLog = log.New(io.Discard, "", 0)
			backend.Start()
			defer backend.Close()

			// Three retrying layers, the top one first in the chain.
			frozen := time.Now()
			upstream := backend.URL
			var layers []*hop.Hop
			for i := 3; i >= 1; i-- {
				rp, err := idemclient.NewRetryPolicy(tc.policy, idemclient.RetryOptions{})
				require.NoError(t, err)
				if tc.policy == idemclient.RetryBudget {
					host := strings.TrimPrefix(upstream, "http://") // as the Transport names it
					n := 0
					for ; n < 1000 && rp.Allow(host, 2, frozen) == ""; n++ {
					}
					require.Equal(t, 100, n, "the floor")
				}
				base := &http.Transport{MaxIdleConnsPerHost: 64}
				tr, err := idemclient.New(base, idemclient.Options{
					MaxAttempts: 4, RetryPolicy: rp,
					Now:   func() time.Time { return frozen },                                    // the budget's window stands still
					Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }, // backoff without waiting
				})
				require.NoError(t, err)
				h, err := hop.Listen(hop.Spec{Name: fmt.Sprintf("layer%d", i), Kind: hop.HTTP, Listen: "127.0.0.1:0", Upstream: upstream},
					nil, hop.Options{Transport: tr})
				require.NoError(t, err)
				defer h.Close()
				layers = append([]*hop.Hop{h}, layers...)
				upstream = h.URL()
			}

			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
			defer client.CloseIdleConnections()
			var wg sync.WaitGroup
			next := atomic.Int64{}
			for range 8 {
				wg.Go(func() {
					for next.Add(1) <= int64(tc.ops) {
						req, _ := http.NewRequest(http.MethodPost, layers[0].URL()+"/v1/payments", strings.NewReader(`{"amount":1250}`))
						req.Header.Set(idemclient.HeaderKey, idemclient.NewKey())
						resp, err := client.Do(req)
						if !assertNoError(t, err) {
							return
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusServiceUnavailable {
							t.Errorf("status %d at the top, want the backend's 503", resp.StatusCode)
						}
					}
				})
			}
			wg.Wait()
			perOp := float64(bottom.Load()) / float64(tc.ops)
			t.Logf("%s: %d operations, at each layer %d, %d, %d requests; %d attempts at the backend, %.2f per operation",
				tc.policy, tc.ops, layers[0].Totals().Requests, layers[1].Totals().Requests, layers[2].Totals().Requests, bottom.Load(), perOp)
			require.EqualValues(t, tc.ops, layers[0].Totals().Requests)
			tc.check(t, perOp)
		})
	}
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("request: %v", err)
		return false
	}
	return true
}
