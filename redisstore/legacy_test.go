package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLegacyRecords: records written by idemkey before 0.2 (a hash and a
// separate lease key) are read, not misread: replayed when completed, 409
// while their owner's lease lives, taken over (keeping their history) after;
// a mismatch stays a mismatch. Nothing panics and nothing replays wrongly.
func TestLegacyRecords(t *testing.T) {
	for name, b := range map[string]backend{"redis": realBackend(t), "miniredis": miniBackend(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := newStore(t, b, Options{NoCollapse: true})
			old := func(req Request, fields map[string]any, leaseTTL time.Duration) {
				t.Helper()
				k := s.keys(req.Scope, req.Key)
				require.NoError(t, b.client.HSet(ctx, k.Record(), fields).Err())
				require.NoError(t, b.client.PExpire(ctx, k.Record(), time.Hour).Err())
				if leaseTTL > 0 {
					require.NoError(t, b.client.Set(ctx, k.LegacyLease(), "old-token", leaseTTL).Err())
				}
			}

			done := newReq(t)
			old(done, map[string]any{"state": "completed", "fp": done.Fingerprint, "tok": "old-token", "att": 1, "code": 201, "resp": "the old outcome"}, 0)
			c, err := s.Claim(ctx, done)
			require.NoError(t, err)
			require.Equal(t, Replayed, c.Status)
			require.Equal(t, Response{Code: 201, Body: []byte("the old outcome")}, c.Response)
			other := done
			other.Fingerprint = "another"
			_, err = s.Claim(ctx, other)
			require.ErrorIs(t, err, ErrMismatch)
			_, err = s.Lookup(ctx, done.Scope, done.Key)
			require.ErrorContains(t, err, "before 0.2")

			running := newReq(t)
			old(running, map[string]any{"state": "started", "fp": running.Fingerprint, "tok": "old-token", "att": 1}, time.Minute)
			_, err = s.Claim(ctx, running)
			require.ErrorIs(t, err, ErrInProgress, "its old owner still holds the lease")

			crashed := newReq(t)
			old(crashed, map[string]any{"state": "started", "fp": crashed.Fingerprint, "tok": "old-token", "att": 2, "rp": "charged", "rpd": "ch_1"}, 0)
			c, err = s.Claim(ctx, crashed)
			require.NoError(t, err)
			require.Equal(t, TookOver, c.Status)
			require.Equal(t, 3, c.Lease.Attempt)
			require.Equal(t, "charged", c.Lease.RecoveryPoint)
			require.Equal(t, "ch_1", string(c.Lease.RecoveryData))
			require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200, Body: []byte("resumed")}))
			c, err = s.Claim(ctx, crashed)
			require.NoError(t, err)
			require.Equal(t, Replayed, c.Status)
			require.Equal(t, "resumed", string(c.Response.Body))
		})
	}
}
