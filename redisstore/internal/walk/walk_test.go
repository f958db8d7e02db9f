package walk

import (
	"context"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/redisstore/internal/record"
)

// TestRun: every key under the prefix is passed on once, as read: a
// record's head, or the whole of a started record and, with Bodies, of a
// completed one; what is not a record's string with its type; tombstones
// counted, not passed; keys outside the prefix never seen.
func TestRun(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	ctx, addr := context.Background(), client.Options().Addr
	fp := record.Fingerprint("f")
	started, done, hash := record.NewKeys("p:", "s", "started"), record.NewKeys("p:", "s", "done"), record.NewKeys("p:", "s", "hash")
	big := strings.Repeat("b", 2*HeadLen)
	require.NoError(t, client.Set(ctx, started.Record(), record.AppendStarted(nil, &fp, "12345678", "1000", &record.Started{Attempt: 1, Label: big}), 0).Err())
	require.NoError(t, client.Set(ctx, done.Record(), record.AppendCompleted(nil, &fp, 1, 201, []byte(big)), 0).Err())
	require.NoError(t, client.Set(ctx, done.Tombstone(), "1", 0).Err())
	require.NoError(t, client.HSet(ctx, hash.Record(), "f", "v").Err())
	require.NoError(t, client.RPush(ctx, "p:other", "x").Err())
	require.NoError(t, client.Set(ctx, "elsewhere", "x", 0).Err())

	for _, bodies := range []bool{false, true} {
		got := map[string]Key{}
		st, err := Run(ctx, client, Options{Prefix: "p:", Count: 2, Bodies: bodies}, func(k *Key) error {
			require.NotContains(t, got, k.Name, "passed on twice")
			got[k.Name] = *k
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, Stats{Servers: 1, Keys: 5, Records: 2, Matched: 2, NotRecords: 2, Tombstones: 1,
			Calls: st.Calls, SlowestCall: st.SlowestCall}, st)
		require.Len(t, got, 4)

		s := got[started.Record()]
		require.True(t, s.Record && s.Whole, "a started record is read whole")
		require.Equal(t, "", s.Type)
		require.EqualValues(t, len(s.Value), s.Size)
		require.EqualValues(t, -1, s.TTL)
		require.Equal(t, "started", s.Found.State())
		require.Equal(t, big, s.Found.Started.Label)

		d := got[done.Record()]
		require.Equal(t, bodies, d.Whole, "a completed record is read whole only with Bodies")
		require.Greater(t, d.Size, int64(HeadLen))
		if !bodies {
			require.Len(t, d.Value, HeadLen)
		}
		require.True(t, d.Found.Completed)
		require.Equal(t, 201, d.Found.Code)

		require.Equal(t, Key{Name: hash.Record(), Server: addr, Record: true, Type: "hash",
			Problem: "a record in the format of idemkey before 0.2, which expires with its retention"}, got[hash.Record()])
		require.Equal(t, Key{Name: "p:other", Server: addr, Type: "list",
			Problem: "not a key name idemkey writes (a list)"}, got["p:other"])
	}

	stop := context.Canceled
	_, err := Run(ctx, client, Options{Prefix: "p:", Count: 10}, func(*Key) error { return stop })
	require.ErrorIs(t, err, stop, "fn's error stops the walk")
}
