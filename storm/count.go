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

// readCount reads the number at Config.CountField from Config.CountURL,
// with one GET bounded by Config.Timeout.
func (r *runner) readCount(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.CountURL, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "idemkey-storm")
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxCountBytes+1))
	if err != nil {
		return 0, fmt.Errorf("GET %s: reading the body: %w", r.cfg.CountURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: status %d", r.cfg.CountURL, resp.StatusCode)
	}
	if len(body) > maxCountBytes {
		return 0, fmt.Errorf("GET %s: body over %d bytes", r.cfg.CountURL, maxCountBytes)
	}
	n, err := httpflag.CountField(body, r.cfg.CountField)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", r.cfg.CountURL, err)
	}
	return n, nil
}
