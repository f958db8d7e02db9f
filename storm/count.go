package storm

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/idemkey/idemkey/internal/httpflag"
)

// maxCountBytes bounds the answer of Config.CountURL.
const maxCountBytes = 1 << 20

// readCountBody GETs Config.CountURL, bounded by Config.Timeout, and
// returns its body.
func (r *runner) readCountBody(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.CountURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "idemkey-storm")
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxCountBytes+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: reading the body: %w", redactURL(r.cfg.CountURL), err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d", redactURL(r.cfg.CountURL), resp.StatusCode)
	}
	if len(body) > maxCountBytes {
		return nil, fmt.Errorf("GET %s: body over %d bytes", redactURL(r.cfg.CountURL), maxCountBytes)
	}
	return body, nil
}

// readCounts reads every count with one GET, and fails unless all of them
// could be read.
func (r *runner) readCounts(ctx context.Context, counts []CountSpec) (map[string]int64, error) {
	got, errs := r.readCountsAfter(ctx, counts)
	for _, c := range counts {
		if e, ok := errs[c.Field]; ok {
			return nil, fmt.Errorf("%s", e)
		}
	}
	return got, nil
}

// readCountsAfter reads every count with one GET, and returns the numbers
// read and, by field, why the others could not be.
func (r *runner) readCountsAfter(ctx context.Context, counts []CountSpec) (map[string]int64, map[string]string) {
	got, errs := map[string]int64{}, map[string]string{}
	body, err := r.readCountBody(ctx)
	for _, c := range counts {
		if err != nil {
			errs[c.Field] = err.Error()
			continue
		}
		n, err := httpflag.CountField(body, c.Field)
		if err != nil {
			errs[c.Field] = fmt.Sprintf("GET %s: %v", redactURL(r.cfg.CountURL), err)
			continue
		}
		got[c.Field] = n
	}
	return got, errs
}

// settle waits, before the counts are read after the storm, until
// Config.Settle has passed since the last attempt ended (the probe's
// included), when an attempt lost its answer: its execution may still be
// running on the server. It reports false when ctx was cancelled first.
func (r *runner) settle(ctx context.Context, keys []*keyRun) bool {
	if r.cfg.Settle <= 0 {
		return true
	}
	var last time.Duration
	lost := false
	for _, k := range keys {
		k.mu.Lock()
		for i := range k.op.Attempts {
			a := &k.op.Attempts[i]
			last = max(last, a.Done)
			lost = lost || a.Class.Lost()
		}
		k.mu.Unlock()
	}
	if !lost {
		return true
	}
	wait := time.Until(r.start.Add(last + r.cfg.Settle))
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
