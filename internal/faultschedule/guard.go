package faultschedule

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/httpmw"
	"github.com/idemkey/idemkey/observe"
	"github.com/idemkey/idemkey/redisstore"
)

// A Guard puts an idempotency layer in front of a service instance: the
// real one (Real) or a planted bug (Toy). rdb reaches Redis through the
// instance's own fault proxy. It returns the handler and what ends it.
type Guard func(svc *Service, rdb redis.UniversalClient) (http.Handler, func(), error)

// Real is idemkey: redisstore with opts (its Observer and Logger are the
// guard's) behind httpmw. The service records the refusal of a run's
// completion when the store reports the run fenced, and that its outcome
// was not stored when the store says so.
func Real(opts redisstore.Options) Guard {
	return func(svc *Service, rdb redis.UniversalClient) (http.Handler, func(), error) {
		opts := opts
		opts.Logger = slog.New(slog.DiscardHandler) // the schedules break Redis on purpose
		opts.Observer = observe.Func{OnEvent: func(ctx context.Context, e *observe.Event) {
			switch e.Kind {
			case observe.Fenced:
				svc.refused(ctx, e.KeyHash(hashSecret), e.Attempt)
			case observe.NotStored:
				svc.notStored(ctx, e.KeyHash(hashSecret), e.Attempt)
				svc.sample(e.Err)
			}
		}}
		store, err := redisstore.New(rdb, opts)
		if err != nil {
			return nil, nil, err
		}
		h := httpmw.New(store, httpmw.Options{Scope: httpmw.SharedScope(scope), Logger: slog.New(slog.DiscardHandler)})
		info := func(ctx context.Context) (string, int) { return httpmw.Key(ctx), httpmw.Attempt(ctx) }
		return h(svc.handler(info)), func() {}, nil
	}
}
