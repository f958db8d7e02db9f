package otel_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	idemotel "github.com/idemkey/idemkey/otel"
	"github.com/idemkey/idemkey/redisstore"
)

// Trace a store's Redis calls under the caller's span. Without
// TracerProvider and MeterProvider, New uses the global providers.
func ExampleNew() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	obs, err := idemotel.New(idemotel.Options{TracerProvider: tp})
	if err != nil {
		panic(err)
	}
	store, err := redisstore.New(rdb, redisstore.Options{Observer: obs})
	if err != nil {
		panic(err)
	}
	ctx, job := tp.Tracer("app").Start(context.Background(), "send invoice")
	req := redisstore.Request{Scope: "acct_1", Key: "invoice-42", Label: "send-invoice"}
	for range 2 { // the first call runs; the retry replays
		if _, err := store.Do(ctx, req, func(context.Context, *redisstore.Lease) ([]byte, error) {
			return []byte("sent"), nil
		}); err != nil {
			panic(err)
		}
	}
	job.End()

	for _, s := range spans.GetSpans() {
		set := attribute.NewSet(s.Attributes...)
		d, _ := set.Value("idemkey.decision")
		fmt.Println(s.Name, d.AsString())
	}
	// Output:
	// idemkey.claim claimed
	// idemkey.complete completed
	// idemkey.claim replayed
	// send invoice
}
