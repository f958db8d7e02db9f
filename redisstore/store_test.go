package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore/internal/record"
)

// backend is a Redis the conformance suite runs against.
type backend struct {
	client redis.UniversalClient
	// newClient opens another client to the same Redis, as another process would.
	newClient func(t *testing.T) redis.UniversalClient
	mr        *miniredis.Miniredis // nil for a real redis-server
}

// expireLease makes the lease of req lapse: on miniredis by aging its TTLs
// past the lease (the lease lives in the record's TTL), on a real server by
// polling Lookup until the record shows no lease left.
func (b backend) expireLease(t *testing.T, s *Store, req Request) {
	t.Helper()
	if b.mr != nil {
		b.mr.FastForward(s.opts.Lease + time.Millisecond)
		return
	}
	require.Eventually(t, func() bool {
		rec, err := s.Lookup(context.Background(), req.Scope, req.Key)
		require.NoError(t, err)
		return rec.LeaseTTL == 0
	}, 10*time.Second, 5*time.Millisecond, "lease did not lapse")
}

// expireRecord waits out the record's retention.
func (b backend) expireRecord(t *testing.T, s *Store, req Request) {
	t.Helper()
	if b.mr != nil {
		b.mr.FastForward(s.opts.Retention + time.Millisecond)
		return
	}
	require.Eventually(t, func() bool {
		_, err := s.Lookup(context.Background(), req.Scope, req.Key)
		return errors.Is(err, ErrNotFound)
	}, 10*time.Second, 5*time.Millisecond, "record did not expire")
}

func miniBackend(t *testing.T) backend {
	mr := miniredis.RunT(t)
	newClient := func(t *testing.T) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	return backend{client: newClient(t), newClient: newClient, mr: mr}
}

func realBackend(t *testing.T) backend {
	srv := redistest.Start(t)
	newClient := func(t *testing.T) redis.UniversalClient { return srv.Client(t) }
	return backend{client: newClient(t), newClient: newClient}
}

func clusterBackend(t *testing.T) backend {
	cl := redistest.StartCluster(t, 3)
	newClient := func(t *testing.T) redis.UniversalClient { return cl.Client(t) }
	return backend{client: newClient(t), newClient: newClient}
}

// pipelinedBackend is b with every client, b's own and those newClient
// opens, replaced by its auto-pipeliner: one shared instance per client,
// closed (before the client) when the test ends.
func pipelinedBackend(t *testing.T, b backend) backend {
	newClient := func(t *testing.T) redis.UniversalClient { return autoPipeliner(t, b.newClient(t)) }
	return backend{client: autoPipeliner(t, b.client), newClient: newClient, mr: b.mr}
}

// autoPipeliner returns client's auto-pipeliner, closed when the test ends.
var autoPipeliner = redistest.AutoPipeliner

func TestStoreMiniredis(t *testing.T) { testStore(t, miniBackend(t)) }
func TestStoreRedis(t *testing.T)     { testStore(t, realBackend(t)) }
func TestStoreCluster(t *testing.T) {
	t.Parallel() // a cluster of its own, mostly waiting on gossip
	testStore(t, clusterBackend(t))
}

// TestStoreRedisPipelined and TestStoreClusterPipelined run the suite with
// the stores on the auto-pipeliner, which does not end calls at their
// deadline: the store does, on another goroutine. The cluster's is a long
// drill (IDEMKEY_LONG=1).
func TestStoreRedisPipelined(t *testing.T) { testStore(t, pipelinedBackend(t, realBackend(t))) }

func TestStoreClusterPipelined(t *testing.T) {
	redistest.Long(t)
	testStore(t, pipelinedBackend(t, clusterBackend(t)))
}

var keySeq atomic.Int64

// newReq returns a request with a key no other test uses.
func newReq(t *testing.T) Request {
	return Request{
		Scope:       "acct_1",
		Key:         fmt.Sprintf("%s-%d", t.Name(), keySeq.Add(1)),
		Fingerprint: "fp-1",
		Label:       "POST /v1/things",
	}
}

func newStore(t *testing.T, b backend, opts Options) *Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler) // what the store finds wrong with the test's Redis, often on purpose
	}
	s, err := New(b.client, opts)
	require.NoError(t, err)
	return s
}

// testStore is the conformance suite every backend must pass.
// Subtests share b: each uses keys of its own.
func testStore(t *testing.T, b backend) {
	ctx := context.Background()

	t.Run("concurrent claims: one owner, the rest in progress, then byte-identical replays", func(t *testing.T) {
		s := newStore(t, b, Options{})
		req := newReq(t)
		const n = 200
		var (
			wg         sync.WaitGroup
			start      = make(chan struct{})
			mu         sync.Mutex
			leases     []*Lease
			inProgress int
			others     []error
		)
		for range n {
			wg.Go(func() {
				<-start
				c, err := s.Claim(ctx, req)
				mu.Lock()
				defer mu.Unlock()
				var ip *InProgressError
				switch {
				case err == nil && c.Status == Claimed:
					leases = append(leases, c.Lease)
				case errors.As(err, &ip) && ip.LeaseLeft > 0:
					inProgress++
				default:
					others = append(others, fmt.Errorf("status %v, err %w", c, err))
				}
			})
		}
		close(start)
		wg.Wait()
		require.Empty(t, others)
		require.Len(t, leases, 1)
		require.Equal(t, n-1, inProgress)

		body := []byte("{\"id\":\"pay_1\"}\x00\xff binary too")
		require.NoError(t, leases[0].Complete(ctx, Response{Code: 201, Body: body}))

		replays := make([]*Claim, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() { replays[i], errs[i] = s.Claim(ctx, req) })
		}
		wg.Wait()
		for i, c := range replays {
			require.NoError(t, errs[i])
			require.Equal(t, Replayed, c.Status)
			require.Nil(t, c.Lease)
			require.Equal(t, 201, c.Response.Code)
			require.True(t, bytes.Equal(body, c.Response.Body), "replay differs: %q", c.Response.Body)
		}
	})

	t.Run("mismatch leaves the record untouched", func(t *testing.T) {
		s := newStore(t, b, Options{})
		req := newReq(t)
		c, err := s.Claim(ctx, req)
		require.NoError(t, err)
		other := req
		other.Fingerprint = "fp-2"

		before, err := s.Lookup(ctx, req.Scope, req.Key)
		require.NoError(t, err)
		_, err = s.Claim(ctx, other)
		require.ErrorIs(t, err, ErrMismatch)
		after, err := s.Lookup(ctx, req.Scope, req.Key)
		require.NoError(t, err)
		before.TTL, after.TTL, before.LeaseTTL, after.LeaseTTL = 0, 0, 0, 0
		require.Equal(t, before, after)

		// Still a mismatch once completed, and the replay is unharmed.
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200, Body: []byte("ok")}))
		_, err = s.Claim(ctx, other)
		require.ErrorIs(t, err, ErrMismatch)
		c, err = s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, Replayed, c.Status)
		require.Equal(t, "ok", string(c.Response.Body))
	})

	t.Run("takeover resumes from the checkpoint and fences the old owner", func(t *testing.T) {
		s := newStore(t, b, Options{Lease: 200 * time.Millisecond})
		req := newReq(t)
		c1, err := s.Claim(ctx, req)
		require.NoError(t, err)
		old := c1.Lease
		require.Equal(t, 1, old.Attempt)
		require.Empty(t, old.RecoveryPoint)
		require.NoError(t, old.Checkpoint(ctx, "charged", []byte(`{"charge":"ch_1"}`)))

		// The owner stops heartbeating: its lease lapses. Another process
		// takes over.
		b.expireLease(t, s, req)
		s2 := newStore(t, b, Options{Lease: 200 * time.Millisecond})
		c2, err := s2.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, TookOver, c2.Status)
		cur := c2.Lease
		require.Equal(t, 2, cur.Attempt)
		require.Equal(t, "charged", cur.RecoveryPoint)
		require.Equal(t, `{"charge":"ch_1"}`, string(cur.RecoveryData))
		require.Equal(t, old.DerivedKey("charge"), cur.DerivedKey("charge"), "derived keys must survive a takeover")

		// A third caller sees the new owner at work.
		_, err = newStore(t, b, Options{}).Claim(ctx, req)
		require.ErrorIs(t, err, ErrInProgress)

		// The old owner wakes up: every write it tries is fenced off.
		require.ErrorIs(t, old.Complete(ctx, Response{Code: 200, Body: []byte("old")}), ErrLeaseLost)
		require.ErrorIs(t, old.Extend(ctx), ErrLeaseLost)
		require.ErrorIs(t, old.Checkpoint(ctx, "bogus", nil), ErrLeaseLost)
		require.ErrorIs(t, old.Release(ctx), ErrLeaseLost)
		rec, err := s.Lookup(ctx, req.Scope, req.Key)
		require.NoError(t, err)
		require.Equal(t, Started, rec.State)
		require.Equal(t, "charged", rec.RecoveryPoint)

		require.NoError(t, cur.Complete(ctx, Response{Code: 201, Body: []byte("new")}))
		require.NoError(t, cur.Complete(ctx, Response{Code: 201, Body: []byte("new")}), "a repeated complete by the owner succeeds")
		require.ErrorIs(t, old.Complete(ctx, Response{Code: 200, Body: []byte("old")}), ErrLeaseLost)
		c3, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, Replayed, c3.Status)
		require.Equal(t, Response{Code: 201, Body: []byte("new")}, c3.Response)
	})

	t.Run("a slow owner whose lease lapsed can still complete if nobody took over", func(t *testing.T) {
		s := newStore(t, b, Options{Lease: 100 * time.Millisecond})
		req := newReq(t)
		c, err := s.Claim(ctx, req)
		require.NoError(t, err)
		b.expireLease(t, s, req)
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200, Body: []byte("late")}))
		c, err = s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, "late", string(c.Response.Body))
	})

	t.Run("extend keeps a live owner's lease", func(t *testing.T) {
		// A lease of 2s, of which more than 500ms is left: a stall of
		// 1.5s between the extend and the lookup still passes.
		s := newStore(t, b, Options{Lease: 2 * time.Second})
		req := newReq(t)
		c, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.NoError(t, c.Lease.Extend(ctx))
		rec, err := s.Lookup(ctx, req.Scope, req.Key)
		require.NoError(t, err)
		require.Greater(t, rec.LeaseTTL, 500*time.Millisecond)
	})

	t.Run("release frees the key; a non-owner's release changes nothing", func(t *testing.T) {
		s := newStore(t, b, Options{Lease: 200 * time.Millisecond})
		req := newReq(t)
		c1, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.NoError(t, c1.Lease.Release(ctx))
		_, err = s.Lookup(ctx, req.Scope, req.Key)
		require.ErrorIs(t, err, ErrNotFound, "a release without a checkpoint forgets the record")
		require.NoError(t, c1.Lease.Release(ctx), "releasing again is harmless")

		c2, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, Claimed, c2.Status)
		require.Equal(t, 1, c2.Lease.Attempt)

		// c1 no longer owns it: its release, complete and extend are refused.
		require.ErrorIs(t, c1.Lease.Release(ctx), ErrLeaseLost)
		require.ErrorIs(t, c1.Lease.Complete(ctx, Response{}), ErrLeaseLost)
		_, err = s.Claim(ctx, req)
		require.ErrorIs(t, err, ErrInProgress, "c2 still holds the key")

		// A completed record cannot be released.
		require.NoError(t, c2.Lease.Complete(ctx, Response{Code: 200}))
		require.ErrorIs(t, c2.Lease.Release(ctx), ErrLeaseLost)
		c3, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, Replayed, c3.Status)
	})

	t.Run("release after a checkpoint keeps the recovery point for an immediate takeover", func(t *testing.T) {
		s := newStore(t, b, Options{})
		req := newReq(t)
		c1, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.NoError(t, c1.Lease.Checkpoint(ctx, "step-1", []byte("d1")))
		require.NoError(t, c1.Lease.Release(ctx))
		c2, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, TookOver, c2.Status)
		require.Equal(t, "step-1", c2.Lease.RecoveryPoint)
		require.Equal(t, "d1", string(c2.Lease.RecoveryData))
	})

	t.Run("interrupt keeps a first attempt's record: the next claim takes over at once as attempt 2", func(t *testing.T) {
		s := newStore(t, b, Options{})
		req := newReq(t)
		c1, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.NoError(t, c1.Lease.Interrupt(ctx))
		rec, err := s.Lookup(ctx, req.Scope, req.Key)
		require.NoError(t, err, "an interrupted run may have done part of its work: its record stays")
		require.Equal(t, Released, rec.State, "no owner: the lease was given back")
		require.Zero(t, rec.LeaseTTL, "only the lease ended")
		c2, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, TookOver, c2.Status, "no wait for the lease: it was ended")
		require.Equal(t, 2, c2.Lease.Attempt)
		require.ErrorIs(t, c1.Lease.Interrupt(ctx), ErrLeaseLost, "fenced once taken over")
		require.NoError(t, c2.Lease.Complete(ctx, Response{Code: 201}))
		require.ErrorIs(t, c2.Lease.Interrupt(ctx), ErrLeaseLost, "a completed record is not interrupted")
	})

	t.Run("every key has a TTL and completed records expire after retention", func(t *testing.T) {
		s := newStore(t, b, Options{Lease: 100 * time.Millisecond, Retention: 400 * time.Millisecond})
		req := newReq(t)
		c, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.NoError(t, c.Lease.Checkpoint(ctx, "p", []byte("x")))
		keys := s.keys(req.Scope, req.Key)
		ttl, err := b.client.PTTL(ctx, keys.Record()).Result()
		require.NoError(t, err)
		require.Positive(t, ttl, "the record has no TTL")
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 200, Body: []byte("done")}))
		n, err := b.client.Exists(ctx, keys.LegacyLease(), keys.Tombstone()).Result()
		require.NoError(t, err)
		require.Zero(t, n, "a record is one key")
		rec, err := s.Lookup(ctx, req.Scope, req.Key)
		require.NoError(t, err)
		require.Equal(t, Completed, rec.State)
		require.Positive(t, rec.TTL)
		require.LessOrEqual(t, rec.TTL, 400*time.Millisecond)
		require.Nil(t, rec.RecoveryData, "completion drops the recovery data")

		b.expireRecord(t, s, req)
		c, err = s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, Claimed, c.Status, "after retention the key is new again")
		require.NoError(t, c.Lease.Release(ctx))
	})

	t.Run("lookup shows the record", func(t *testing.T) {
		s := newStore(t, b, Options{})
		req := newReq(t)
		_, err := s.Lookup(ctx, req.Scope, req.Key)
		require.ErrorIs(t, err, ErrNotFound)
		c, err := s.Claim(ctx, req)
		require.NoError(t, err)
		rec, err := s.Lookup(ctx, req.Scope, req.Key)
		require.NoError(t, err)
		require.Equal(t, Started, rec.State)
		require.Equal(t, req.Scope, rec.Scope)
		require.Equal(t, req.Key, rec.Key)
		require.Equal(t, req.Label, rec.Label)
		fp := record.Fingerprint(req.Fingerprint)
		require.Equal(t, string(fp[:]), rec.Fingerprint)
		require.Equal(t, 1, rec.Attempt)
		require.Positive(t, rec.LeaseTTL)
		require.WithinDuration(t, time.Now(), rec.CreatedAt, time.Minute)
		require.Nil(t, rec.Response)
		require.NoError(t, c.Lease.Complete(ctx, Response{Code: 402, Body: []byte("declined")}))
		rec, err = s.Lookup(ctx, req.Scope, req.Key)
		require.NoError(t, err)
		require.Equal(t, Completed, rec.State)
		require.Equal(t, &Response{Code: 402, Body: []byte("declined")}, rec.Response)
		require.Zero(t, rec.LeaseTTL)
	})

	t.Run("keys built to collide are separate records", func(t *testing.T) {
		s := newStore(t, b, Options{})
		long := strings.Repeat("k", 255)
		cases := []Request{
			{Scope: "a", Key: "{tag}"}, {Scope: "a", Key: "}tag{"}, {Scope: "a", Key: "x:lease"},
			{Scope: "a", Key: "x"}, {Scope: "a:x", Key: ""}, {Scope: "a", Key: "*"}, {Scope: "a", Key: "?"},
			{Scope: "a", Key: "[a-z]"}, {Scope: "a", Key: "line\nbreak"}, {Scope: "a", Key: "nul\x00byte"},
			{Scope: "a\x00", Key: "b"}, {Scope: "a", Key: "\x00b"}, {Scope: "b", Key: "{tag}"},
			{Scope: "", Key: "a{tag}"}, {Scope: "a", Key: long}, {Scope: "b", Key: long},
		}
		for i, req := range cases {
			if req.Key == "" {
				_, err := s.Claim(ctx, req)
				require.ErrorIs(t, err, ErrInvalidRequest)
				continue
			}
			c, err := s.Claim(ctx, req)
			require.NoError(t, err, "case %d", i)
			require.Equal(t, Claimed, c.Status, "case %d %q/%q collided with an earlier one", i, req.Scope, req.Key)
			require.NoError(t, c.Lease.Complete(ctx, Response{Code: i}))
		}
		for i, req := range cases {
			if req.Key == "" {
				continue
			}
			c, err := s.Claim(ctx, req)
			require.NoError(t, err)
			require.Equal(t, i, c.Response.Code)
		}
	})

	t.Run("invalid requests are refused before Redis", func(t *testing.T) {
		s := newStore(t, b, Options{})
		for _, req := range []Request{
			{Key: ""},
			{Key: strings.Repeat("k", MaxFieldLen+1)},
			{Key: "k", Scope: strings.Repeat("s", MaxFieldLen+1)},
			{Key: "k", Fingerprint: strings.Repeat("f", MaxFieldLen+1)},
		} {
			_, err := s.Claim(ctx, req)
			require.ErrorIs(t, err, ErrInvalidRequest)
			_, err = s.Do(ctx, req, func(context.Context, *Lease) ([]byte, error) { panic("must not run") })
			require.ErrorIs(t, err, ErrInvalidRequest)
		}
	})

	t.Run("do", func(t *testing.T) { testDo(t, b) })
}

// steal makes another token the owner of l's record, as a takeover would.
func steal(t *testing.T, client redis.UniversalClient, l *Lease) {
	t.Helper()
	ctx := context.Background()
	v, err := client.Get(ctx, l.keys.Record()).Result()
	require.NoError(t, err)
	require.NoError(t, client.SetArgs(ctx, l.keys.Record(), v[:record.OffToken]+"someone!"+v[record.OffStartedTail:], redis.SetArgs{KeepTTL: true}).Err())
}
