package footprint_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/corpus"
	"github.com/idemkey/idemkey/internal/footprint"
	"github.com/idemkey/idemkey/internal/redistest"
)

// TestFootprint measures every corpus on a private redis-server and holds
// the results to the targets. With -v it prints the tables
// (IDEMKEY_FOOTPRINT_RECORDS sets the records per row; default 200).
func TestFootprint(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	records := 200
	if testing.Short() {
		records = 50
	}
	if n := os.Getenv("IDEMKEY_FOOTPRINT_RECORDS"); n != "" {
		var err error
		records, err = strconv.Atoi(n)
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := footprint.Measure(ctx, rdb, footprint.Options{Records: records, TrainSamples: 500})
	require.NoError(t, err)
	t.Log("\n" + rep.Markdown())

	rows := map[string]footprint.Row{}
	for _, r := range rep.Rows {
		rows[r.Corpus+" "+r.Mode] = r
	}
	pay := rows[corpus.Payment.Name+" "+footprint.Dictionary]
	require.LessOrEqual(t, pay.Usage, pay.Target(), "1 KiB ID-heavy JSON with a dictionary: at most 0.5 x body + 150 B")
	for _, r := range rep.Bench {
		require.LessOrEqual(t, r.Fixed(), 150.0, "fixed overhead per record with the bench app's headers, body %.0f", r.Body)
	}
	for _, k := range corpus.Kinds() {
		raw, z, d := rows[k.Name+" "+footprint.Raw], rows[k.Name+" "+footprint.Compressed], rows[k.Name+" "+footprint.Dictionary]
		require.Less(t, z.Stored, raw.Stored, "%s: compression shrinks every corpus", k.Name)
		require.LessOrEqual(t, d.Stored, z.Stored, "%s: a dictionary never does worse", k.Name)
	}
	require.Positive(t, rep.Tombstone.Usage)
	require.LessOrEqual(t, rep.Tombstone.Usage, 100.0)

	keys, err := rdb.DBSize(ctx).Result()
	require.NoError(t, err)
	require.Zero(t, keys, "Measure deletes what it wrote")
}
