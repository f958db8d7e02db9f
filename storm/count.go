package storm

import (
	"context"
	"fmt"
	"io"
	"net/http"

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
