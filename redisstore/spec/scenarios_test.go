package spec

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/httpcore"
	"github.com/idemkey/idemkey/lua"
	"github.com/idemkey/idemkey/redisstore/internal/record"
)

// The fixtures the vectors are made of.
var (
	fixFP     = record.Fingerprint(`POST /v1/payments {"amount":1200}`)
	otherFP   = record.Fingerprint(`POST /v1/payments {"amount":9900}`)
	tokA      = "\xa1\xb2\xc3\xd4\xe5\xf6\x07\x18"
	tokB      = "\x0f\x1e\x2d\x3c\x4b\x5a\x69\x78"
	created   = int64(1767225600000) // 2026-01-01T00:00:00Z
	label     = "POST /v1/payments"
	retention = "86400000" // 24h, the store's default
	threshold = "86390000" // 24h minus the default lease of 10s
	// httpOutcome is a stored HTTP response, as the middleware stores it.
	httpOutcome = string((*httpcore.ResponseCodec)(nil).Append(nil,
		http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/pay_1"}},
		[]byte(`{"id":"pay_1","status":"succeeded"}`), false))
)

// startedRec is a started record of the fixtures' fingerprint.
func startedRec(fp [16]byte, tok string, attempt int, thr string, rp, rpd string) string {
	return string(record.AppendStarted(nil, &fp, tok, thr,
		&record.Started{Attempt: attempt, RecoveryPoint: rp, RecoveryData: []byte(rpd), Label: label, CreatedMS: created}))
}

// completedRec is a completed record of the fixtures' fingerprint.
func completedRec(attempt, code int, outcome string) string {
	return string(record.AppendCompleted(nil, &fixFP, attempt, code, []byte(outcome)))
}

// withFlags returns v with its flags byte set, as watch.lua and
// release.lua set it.
func withFlags(v string, flags byte) string { return v[:1] + string(flags) + v[2:] }

// scenario makes one script reply on a real Redis: the state the vector
// describes, then the script.
type scenario struct {
	family, name string
	run          func(ctx context.Context, c *sc) (any, error)
}

// sc is a scenario's Redis and keys.
type sc struct {
	t   testing.TB
	rdb *redis.Client
	k   record.Keys
}

func (c *sc) set(ctx context.Context, v string, ttl time.Duration) {
	require.NoError(c.t, c.rdb.Set(ctx, c.k.Record(), v, ttl).Err())
}

func (c *sc) hash(ctx context.Context, fields ...any) {
	require.NoError(c.t, c.rdb.HSet(ctx, c.k.Record(), fields...).Err())
	require.NoError(c.t, c.rdb.PExpire(ctx, c.k.Record(), time.Hour).Err())
}

func (c *sc) tombstone(ctx context.Context, fp [16]byte, code, attempt int) {
	require.NoError(c.t, c.rdb.Set(ctx, c.k.Tombstone(), record.Tombstone(&fp, code, attempt), time.Hour).Err())
}

func (c *sc) eval(ctx context.Context, src string, keys []string, args ...any) (any, error) {
	return redis.NewScript(src).Run(ctx, c.rdb, keys, args...).Result()
}

func (c *sc) claim(ctx context.Context, args ...any) (any, error) {
	return c.eval(ctx, lua.Claim, c.k.One, args...)
}

func (c *sc) forget(ctx context.Context, force string) (any, error) {
	return c.eval(ctx, lua.Forget, []string{c.k.Record(), c.k.Tombstone(), c.k.LegacyLease()}, force, "500")
}

const day = 24 * time.Hour

// scenarios are the replies of replies.json, each made on a real Redis.
// A lease that must have run out is short (a threshold of 59500 under a
// retention of 60000: 500ms), so that claim.lua's grace after a restart
// (a lease of a second or more, on a Redis younger than it) cannot apply.
var scenarios = []scenario{
	{"claim", "fresh claim", func(ctx context.Context, c *sc) (any, error) {
		return c.claim(ctx, startedRec(fixFP, tokA, 1, threshold, "", ""), retention)
	}},
	{"claim", "fresh claim on a store that keeps tombstones", func(ctx context.Context, c *sc) (any, error) {
		return c.eval(ctx, lua.Claim, []string{c.k.Record(), c.k.Tombstone()}, startedRec(fixFP, tokA, 1, threshold, "", ""), retention)
	}},
	{"claim", "the same claim sent again", func(ctx context.Context, c *sc) (any, error) {
		v := startedRec(fixFP, tokA, 1, threshold, "", "")
		if _, err := c.claim(ctx, v, retention); err != nil {
			return nil, err
		}
		return c.claim(ctx, v, retention)
	}},
	{"claim", "in progress", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, startedRec(fixFP, tokA, 1, threshold, "", ""), day)
		return c.claim(ctx, startedRec(fixFP, tokB, 1, threshold, "", ""), retention)
	}},
	{"claim", "takeover after the lease ran out", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, startedRec(fixFP, tokA, 1, "59500", "charged", "ch_1"), 50*time.Second)
		return c.claim(ctx, startedRec(fixFP, tokB, 1, "59500", "", ""), "60000")
	}},
	{"claim", "takeover of a released record", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, withFlags(startedRec(fixFP, tokA, 2, threshold, "charged", "ch_1"), 'r'), day)
		return c.claim(ctx, startedRec(fixFP, tokB, 1, threshold, "", ""), retention)
	}},
	{"claim", "replay", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, completedRec(1, 201, httpOutcome), day)
		return c.claim(ctx, startedRec(fixFP, tokB, 1, threshold, "", ""), retention)
	}},
	{"claim", "replay with the record's TTL", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, completedRec(1, 201, httpOutcome), day)
		return c.claim(ctx, startedRec(fixFP, tokB, 1, threshold, "", ""), retention, "ttl")
	}},
	{"claim", "mismatch", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, startedRec(otherFP, tokA, 1, threshold, "", ""), day)
		return c.claim(ctx, startedRec(fixFP, tokB, 1, threshold, "", ""), retention)
	}},
	{"claim", "a record in the format before 0.2", func(ctx context.Context, c *sc) (any, error) {
		c.hash(ctx, "state", "started", "fp", "fp-1", "tok", "old-token", "att", 1)
		return c.claim(ctx, startedRec(fixFP, tokB, 1, threshold, "", ""), retention)
	}},
	{"claim", "only the tombstone is left", func(ctx context.Context, c *sc) (any, error) {
		c.tombstone(ctx, fixFP, 201, 2)
		return c.eval(ctx, lua.Claim, []string{c.k.Record(), c.k.Tombstone()}, startedRec(fixFP, tokB, 1, threshold, "", ""), retention)
	}},
	{"claim", "a tombstone of another fingerprint", func(ctx context.Context, c *sc) (any, error) {
		c.tombstone(ctx, otherFP, 201, 2)
		return c.eval(ctx, lua.Claim, []string{c.k.Record(), c.k.Tombstone()}, startedRec(fixFP, tokB, 1, threshold, "", ""), retention)
	}},
	{"claim", "not a record", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, "a value another application wrote here", day)
		return c.claim(ctx, startedRec(fixFP, tokB, 1, threshold, "", ""), retention)
	}},
	{"claim", "a record of a later major version", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, "T"+startedRec(fixFP, tokA, 1, threshold, "", "")[1:], day)
		return c.claim(ctx, startedRec(fixFP, tokB, 1, threshold, "", ""), retention)
	}},

	{"legacy", "replay of a record before 0.2", func(ctx context.Context, c *sc) (any, error) {
		c.hash(ctx, "state", "completed", "fp", "fp-1", "tok", "old-token", "att", 1, "code", 201, "resp", "the old outcome")
		return c.legacy(ctx)
	}},
	{"legacy", "mismatch", func(ctx context.Context, c *sc) (any, error) {
		c.hash(ctx, "state", "completed", "fp", "fp-2", "tok", "old-token", "att", 1, "code", 201, "resp", "the old outcome")
		return c.legacy(ctx)
	}},
	{"legacy", "in progress", func(ctx context.Context, c *sc) (any, error) {
		c.hash(ctx, "state", "started", "fp", "fp-1", "tok", "old-token", "att", 1)
		require.NoError(c.t, c.rdb.Set(ctx, c.k.LegacyLease(), "old-token", time.Minute).Err())
		return c.legacy(ctx)
	}},
	{"legacy", "takeover", func(ctx context.Context, c *sc) (any, error) {
		c.hash(ctx, "state", "started", "fp", "fp-1", "tok", "old-token", "att", 2, "rp", "charged", "rpd", "ch_1")
		return c.legacy(ctx)
	}},
	{"legacy", "gone meanwhile", func(ctx context.Context, c *sc) (any, error) {
		return c.legacy(ctx)
	}},

	{"owned", "complete: stored", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, startedRec(fixFP, tokA, 1, threshold, "", ""), day)
		return c.eval(ctx, lua.Complete, c.k.One, completedRec(1, 201, httpOutcome), tokA)
	}},
	{"owned", "complete: stored, with its tombstone", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, startedRec(fixFP, tokA, 1, threshold, "", ""), day)
		return c.eval(ctx, lua.Complete, []string{c.k.Record(), c.k.Tombstone()}, completedRec(1, 201, httpOutcome), tokA,
			record.Tombstone(&fixFP, 201, 1), "90000000")
	}},
	{"owned", "complete: sent again after it was stored", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, startedRec(fixFP, tokA, 1, threshold, "", ""), day)
		if _, err := c.eval(ctx, lua.Complete, c.k.One, completedRec(1, 201, httpOutcome), tokA); err != nil {
			return nil, err
		}
		return c.eval(ctx, lua.Complete, c.k.One, completedRec(1, 201, httpOutcome), tokA)
	}},
	{"owned", "complete: lost, another token owns the record", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, startedRec(fixFP, tokB, 2, threshold, "", ""), day)
		return c.eval(ctx, lua.Complete, c.k.One, completedRec(1, 201, httpOutcome), tokA)
	}},
	{"owned", "complete: lost, no record", func(ctx context.Context, c *sc) (any, error) {
		return c.eval(ctx, lua.Complete, c.k.One, completedRec(1, 201, httpOutcome), tokA)
	}},
	{"owned", "release: a first attempt without a recovery point goes", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, startedRec(fixFP, tokA, 1, threshold, "", ""), day)
		return c.eval(ctx, lua.Release, c.k.One, tokA, "0")
	}},
	{"owned", "release: an attempt with history is kept, released", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, startedRec(fixFP, tokA, 2, threshold, "", ""), day)
		return c.eval(ctx, lua.Release, c.k.One, tokA, "0")
	}},
	{"owned", "release: interrupted, kept in any case", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, startedRec(fixFP, tokA, 1, threshold, "", ""), day)
		return c.eval(ctx, lua.Release, c.k.One, tokA, "1")
	}},
	{"owned", "release: already gone", func(ctx context.Context, c *sc) (any, error) {
		return c.eval(ctx, lua.Release, c.k.One, tokA, "0")
	}},
	{"owned", "release: lost, another token owns the record", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, startedRec(fixFP, tokB, 2, threshold, "", ""), day)
		return c.eval(ctx, lua.Release, c.k.One, tokA, "0")
	}},
	{"owned", "extend: extended", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, startedRec(fixFP, tokA, 1, threshold, "", ""), day)
		return c.eval(ctx, lua.Extend, c.k.One, tokA, retention)
	}},
	{"owned", "extend: lost, the record was completed", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, completedRec(1, 201, httpOutcome), day)
		return c.eval(ctx, lua.Extend, c.k.One, tokA, retention)
	}},
	{"owned", "checkpoint: recorded", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, startedRec(fixFP, tokA, 1, threshold, "", ""), day)
		return c.eval(ctx, lua.Checkpoint, c.k.One, tokA, startedRec(fixFP, tokA, 1, threshold, "charged", "ch_1"), retention)
	}},
	{"owned", "checkpoint: lost, the record was released", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, withFlags(startedRec(fixFP, tokA, 2, threshold, "", ""), 'r'), day)
		return c.eval(ctx, lua.Checkpoint, c.k.One, tokA, startedRec(fixFP, tokA, 2, threshold, "charged", "ch_1"), retention)
	}},
	{"owned", "watch: marked", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, startedRec(fixFP, tokA, 1, threshold, "", ""), day)
		return c.eval(ctx, lua.Watch, c.k.One, string(fixFP[:]))
	}},
	{"owned", "watch: not running, the record was completed", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, completedRec(1, 201, httpOutcome), day)
		return c.eval(ctx, lua.Watch, c.k.One, string(fixFP[:]))
	}},

	{"lookup", "a started record", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, startedRec(fixFP, tokA, 1, threshold, "charged", "ch_1"), day)
		return c.eval(ctx, lua.Lookup, c.k.One)
	}},
	{"lookup", "a released record", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, withFlags(startedRec(fixFP, tokA, 2, threshold, "charged", "ch_1"), 'r'), day)
		return c.eval(ctx, lua.Lookup, c.k.One)
	}},
	{"lookup", "a completed record", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, completedRec(1, 201, httpOutcome), day)
		return c.eval(ctx, lua.Lookup, c.k.One)
	}},
	{"lookup", "no record", func(ctx context.Context, c *sc) (any, error) {
		return c.eval(ctx, lua.Lookup, c.k.One)
	}},
	{"lookup", "a record before 0.2", func(ctx context.Context, c *sc) (any, error) {
		c.hash(ctx, "state", "completed", "fp", "fp-1", "tok", "old-token", "att", 1, "code", 201, "resp", "the old outcome")
		return c.eval(ctx, lua.Lookup, c.k.One)
	}},
	{"lookup", "a key of another type", func(ctx context.Context, c *sc) (any, error) {
		require.NoError(c.t, c.rdb.RPush(ctx, c.k.Record(), "x").Err())
		return c.eval(ctx, lua.Lookup, c.k.One)
	}},

	{"forget", "nothing to forget", func(ctx context.Context, c *sc) (any, error) {
		return c.forget(ctx, "0")
	}},
	{"forget", "a completed record", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, completedRec(1, 201, httpOutcome), day)
		return c.forget(ctx, "0")
	}},
	{"forget", "refused: the lease is live", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, startedRec(fixFP, tokA, 1, threshold, "", ""), day)
		return c.forget(ctx, "0")
	}},
	{"forget", "forced: the lease is live", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, startedRec(fixFP, tokA, 1, threshold, "", ""), day)
		return c.forget(ctx, "1")
	}},
	{"forget", "a released record", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, withFlags(startedRec(fixFP, tokA, 2, threshold, "charged", "ch_1"), 'r'), day)
		return c.forget(ctx, "0")
	}},
	{"forget", "only a tombstone", func(ctx context.Context, c *sc) (any, error) {
		c.tombstone(ctx, fixFP, 201, 1)
		return c.forget(ctx, "0")
	}},
	{"forget", "a record before 0.2", func(ctx context.Context, c *sc) (any, error) {
		c.hash(ctx, "state", "completed", "fp", "fp-1", "tok", "old-token", "att", 1, "code", 201, "resp", "the old outcome")
		return c.forget(ctx, "0")
	}},
	{"forget", "not an idemkey record: a string", func(ctx context.Context, c *sc) (any, error) {
		c.set(ctx, "a value another application wrote here", day)
		return c.forget(ctx, "0")
	}},
	{"forget", "not an idemkey record: a list", func(ctx context.Context, c *sc) (any, error) {
		require.NoError(c.t, c.rdb.RPush(ctx, c.k.Record(), "x").Err())
		return c.forget(ctx, "0")
	}},
}

func (c *sc) legacy(ctx context.Context) (any, error) {
	return c.eval(ctx, lua.Legacy, []string{c.k.Record(), c.k.LegacyLease()}, startedRec(fixFP, tokB, 1, threshold, "", ""), retention, "fp-1")
}

// run runs a scenario on its own keys.
func (s *scenario) reply(ctx context.Context, t testing.TB, rdb *redis.Client) (any, error) {
	c := &sc{t: t, rdb: rdb, k: record.NewKeys("spec:", "scenarios", s.family+": "+s.name)}
	return s.run(ctx, c)
}
