package prometheus_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/alicebob/miniredis/v2"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/redis/go-redis/v9"

	idemprom "github.com/idemkey/idemkey/prometheus"
	"github.com/idemkey/idemkey/redisstore"
)

// Count a store's decisions in a registry; serve it with
// promhttp.HandlerFor(reg, promhttp.HandlerOpts{}) on /metrics.
func ExampleNew() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	reg := prom.NewRegistry()
	obs, err := idemprom.New(idemprom.Options{Registerer: reg})
	if err != nil {
		panic(err)
	}
	store, err := redisstore.New(rdb, redisstore.Options{Observer: obs})
	if err != nil {
		panic(err)
	}
	req := redisstore.Request{Scope: "acct_1", Key: "invoice-42", Label: "send-invoice"}
	for range 3 { // the first call runs; the retries replay
		if _, err := store.Do(context.Background(), req, func(context.Context, *redisstore.Lease) ([]byte, error) {
			return []byte("sent"), nil
		}); err != nil {
			panic(err)
		}
	}

	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if mf.GetName() == "idemkey_requests_total" || mf.GetName() == "idemkey_leases_held" {
			_, _ = expfmt.MetricFamilyToText(&b, mf)
		}
	}
	for line := range strings.Lines(b.String()) {
		if !strings.HasPrefix(line, "#") {
			fmt.Print(line)
		}
	}
	// Output:
	// idemkey_leases_held 0
	// idemkey_requests_total{outcome="executed",route="send-invoice"} 1
	// idemkey_requests_total{outcome="replayed",route="send-invoice"} 2
}
