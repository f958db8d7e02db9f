package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/idemkey/idemkey/internal/footprint"
	"github.com/idemkey/idemkey/internal/loadgen"
	"github.com/idemkey/idemkey/redisstore"
)

// Cost case names.
const (
	CaseFirst      = "first execution"
	CaseReplay     = "replay"
	CaseInProgress = "409 in progress"
	CaseMismatch   = "422 key reused"
	CaseDoFirst    = "Do, first execution"
	CaseDoReplay   = "Do, replay"
)

// measureCost counts what Redis does for n requests made by send: it resets
// the server's statistics, runs send, and divides the deltas by n.
func (r *runner) measureCost(ctx context.Context, c *contender, name string, n int, send func() (map[int]int, error)) error {
	if err := r.admin.ConfigResetStat(ctx).Err(); err != nil {
		return err
	}
	trips, cmds := c.count.trips.Load(), c.count.cmds.Load()
	status, err := send()
	if err != nil {
		return fmt.Errorf("%s, %s: %w", c.name, name, err)
	}
	trips, cmds = c.count.trips.Load()-trips, c.count.cmds.Load()-cmds
	stats, err := commandStats(ctx, r.admin)
	if err != nil {
		return err
	}
	cost := Cost{Case: name, Contender: c.name, Requests: n, Status: status,
		RoundTrips: round3(float64(trips) / float64(n)), Sent: round3(float64(cmds) / float64(n)),
		Server: commandsOf(stats, n)}
	r.res.Cost = append(r.res.Cost, cost)
	r.log("cost: %s, %s: %.2f round trips, %.2f EVALSHA, %.2f commands in all per request",
		c.name, name, cost.RoundTrips, cost.Server.EvalSHA, cost.Server.Total)
	return nil
}

// sequential sends n requests one at a time, so that no connection is
// dialled during the measurement (a dial sends HELLO and CLIENT SETINFO).
func (r *runner) sequential(ctx context.Context, c *contender, n int, want int, replay bool,
	req func(i int) (*http.Request, error)) (map[int]int, error) {
	res, err := loadgen.Run(ctx, loadgen.Config{
		Concurrency: 1, MaxRequests: n, Client: c.load,
		Request: func(_, seq int) (*http.Request, error) { return req(seq) },
		Check:   expectStatus(want, replay),
	})
	if err != nil {
		return nil, err
	}
	if res.Errors > 0 {
		return res.Status, fmt.Errorf("%d errors, first: %v", res.Errors, res.FirstError)
	}
	return res.Status, nil
}

// cost counts round trips and commands per first execution and replay of
// every contender with Redis, per 409 and 422 through ours, and per first
// execution and replay of the store's Do.
func (r *runner) cost(ctx context.Context) error {
	n := r.cfg.CostRequests
	for _, name := range r.names {
		c := r.cs[name]
		if c.redis == nil {
			continue
		}
		url := c.url(paymentPath)
		keys := make([]string, n)
		for i := range keys {
			keys[i] = r.key(c.name+".cost", 0, i)
		}
		// Warm the pool's connections and the script cache.
		if _, err := r.sequential(ctx, c, 5, http.StatusCreated, false, func(i int) (*http.Request, error) {
			return newPayment(url, r.key(c.name+".cost-warm", 0, i), firstBody)
		}); err != nil {
			return err
		}
		if err := r.measureCost(ctx, c, CaseFirst, n, func() (map[int]int, error) {
			return r.sequential(ctx, c, n, http.StatusCreated, false, func(i int) (*http.Request, error) {
				return newPayment(url, keys[i], firstBody)
			})
		}); err != nil {
			return err
		}
		if err := r.measureCost(ctx, c, CaseReplay, n, func() (map[int]int, error) {
			return r.sequential(ctx, c, n, http.StatusCreated, true, func(i int) (*http.Request, error) {
				return newPayment(url, keys[i], firstBody)
			})
		}); err != nil {
			return err
		}
		if c.name != Ours {
			continue
		}
		other := []byte(`{"amount":9999,"currency":"eur"}`)
		if err := r.measureCost(ctx, c, CaseMismatch, n, func() (map[int]int, error) {
			return r.sequential(ctx, c, n, http.StatusUnprocessableEntity, false, func(i int) (*http.Request, error) {
				return newPayment(url, keys[i], other)
			})
		}); err != nil {
			return err
		}
		if err := r.inProgressCost(ctx, c, n); err != nil {
			return err
		}
	}
	return r.doCost(ctx, r.cs[Ours], n)
}

// inProgressCost holds one key in progress (its handler blocks) and sends n
// duplicates of it, which get 409.
func (r *runner) inProgressCost(ctx context.Context, c *contender, n int) error {
	url := c.url(holdPath)
	key := r.key("ours.hold", 0, 0)
	c.app.armHold()
	defer c.app.releaseHolds()
	held := make(chan error, 1)
	go func() {
		req, err := newPayment(url, key, firstBody)
		if err == nil {
			var resp *http.Response
			if resp, err = c.load.Do(req.WithContext(ctx)); err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					err = fmt.Errorf("held request: status %d", resp.StatusCode)
				}
			}
		}
		held <- err
	}()
	// Wait until the held request owns the key: its record exists.
	rec := recordKey(limitPrefix, limitScope, key)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := r.admin.Exists(ctx, rec).Result()
		if err != nil {
			return err
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the held request never claimed its key")
		}
		time.Sleep(5 * time.Millisecond)
	}
	err := r.measureCost(ctx, c, CaseInProgress, n, func() (map[int]int, error) {
		return r.sequential(ctx, c, n, http.StatusConflict, false, func(int) (*http.Request, error) {
			return newPayment(url, key, firstBody)
		})
	})
	c.app.releaseHolds()
	if herr := <-held; err == nil {
		err = herr
	}
	return err
}

// doCost counts the store's Do: n first executions, then their replays.
func (r *runner) doCost(ctx context.Context, c *contender, n int) error {
	reqs := make([]redisstore.Request, n)
	for i := range reqs {
		reqs[i] = redisstore.Request{Scope: "bench", Key: r.key("do", 0, i), Fingerprint: "f"}
	}
	fn := func(context.Context, *redisstore.Lease) ([]byte, error) { return []byte("result"), nil }
	for _, cs := range []struct {
		name   string
		replay bool
	}{{CaseDoFirst, false}, {CaseDoReplay, true}} {
		err := r.measureCost(ctx, c, cs.name, n, func() (map[int]int, error) {
			for _, req := range reqs {
				res, err := r.store.Do(ctx, req, fn)
				if err != nil {
					return nil, err
				}
				if res.Replayed != cs.replay {
					return nil, fmt.Errorf("replayed %v, want %v", res.Replayed, cs.replay)
				}
			}
			return nil, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// memorySizes are the response bodies whose records are measured.
var memorySizes = []int{100, 1024, 16 * 1024}

// memory stores one record per body size through ours and reads its size
// with MEMORY USAGE. It also proves that recordKey names the records as
// redisstore does: the record it computes must exist.
func (r *runner) memory(ctx context.Context) error {
	c := r.cs[Ours]
	for _, size := range memorySizes {
		key := r.key("mem", size, 0)
		req, err := newPayment(c.url(blobPath)+"?size="+strconv.Itoa(size), key, firstBody)
		if err != nil {
			return err
		}
		resp, err := c.load.Do(req.WithContext(ctx))
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("blob of %d bytes: status %d", size, resp.StatusCode)
		}
		rec := recordKey(limitPrefix, limitScope, key)
		if n, err := r.admin.Exists(ctx, rec).Result(); err != nil || n != 1 {
			return fmt.Errorf("record %s not found (%v): the bench derives key names unlike redisstore", rec, err)
		}
		usage, err := r.admin.MemoryUsage(ctx, rec, 0).Result()
		if err != nil {
			return err
		}
		stored, err := r.admin.StrLen(ctx, rec).Result() // the whole record is one string
		if err != nil {
			return err
		}
		enc, err := r.admin.ObjectEncoding(ctx, rec).Result()
		if err != nil {
			return err
		}
		m := Memory{BodyBytes: size, StoredBytes: int(stored), Usage: int(usage), Overhead: int(usage) - size, Encoding: enc}
		m.Slack = footprint.AllocatorSlack(m.StoredBytes)
		m.Fixed = m.Overhead - m.Slack
		r.res.Memory = append(r.res.Memory, m)
		r.log("memory: body %d B, stored %d B, MEMORY USAGE %d B, overhead %d B (allocator slack %d B, fixed %d B)",
			size, m.StoredBytes, m.Usage, m.Overhead, m.Slack, m.Fixed)
	}
	return nil
}
