package grpcmw_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkey/idemkey/grpcmw"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

// Two interceptors on one Redis, each with its own Retention: each one's
// records live their own, on a real redis-server.
func TestRetentionPerInterceptor(t *testing.T) {
	srv := redistest.Start(t)
	echo := func(_ context.Context, in *structpb.Struct) (*structpb.Struct, error) { return in, nil }
	for prefix, ret := range map[string]time.Duration{"short:": 10 * time.Minute, "long:": 7 * 24 * time.Hour, "store:": 0} {
		h := start(t, echo, setup{redis: srv, store: redisstore.Options{Prefix: prefix}, server: grpcmw.Options{Retention: ret}})
		a := h.call(ctxT(t, 5*time.Second), "k-1", req(t, map[string]any{"amount": 1}))
		require.NoError(t, a.err)
		if ret == 0 {
			ret = h.store.Options().Retention
		}
		n := 0
		_, err := h.store.Scan(context.Background(), redisstore.ScanOptions{}, func(sc *redisstore.Scanned) error {
			n++
			require.Equal(t, redisstore.Completed, sc.Record.State)
			require.InDelta(t, ret.Seconds(), sc.Record.TTL.Seconds(), 60, "%s: record TTL %v", prefix, sc.Record.TTL)
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
}

func TestRetentionIsCheckedWhenBuilt(t *testing.T) {
	store, err := redisstore.New(redistest.Start(t).Client(t), redisstore.Options{Lease: 10 * time.Second, MaxDuration: time.Minute})
	require.NoError(t, err)
	for _, d := range []time.Duration{-time.Second, time.Second, 10 * time.Second, time.Minute} {
		require.PanicsWithValue(t, "grpcmw: Options.Retention: "+store.ValidateRetention(d).Error(), func() {
			grpcmw.UnaryServerInterceptor(store, grpcmw.Options{Retention: d})
		}, "%v", d)
	}
	require.NotPanics(t, func() { grpcmw.UnaryServerInterceptor(store, grpcmw.Options{Retention: time.Hour}) })
}
