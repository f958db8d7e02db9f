package storm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
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
	n, err := countField(body, r.cfg.CountField)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", r.cfg.CountURL, err)
	}
	return n, nil
}

// countField returns the integer at field, a dotted path of object member
// names, in the JSON document body.
func countField(body []byte, field string) (int64, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return 0, fmt.Errorf("not JSON: %w", err)
	}
	for name := range strings.SplitSeq(field, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return 0, fmt.Errorf("field %q: %q is not inside an object", field, name)
		}
		if v, ok = obj[name]; !ok {
			return 0, fmt.Errorf("field %q: no member %q", field, name)
		}
	}
	num, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("field %q is not a number", field)
	}
	if n, err := num.Int64(); err == nil {
		return n, nil
	}
	f, err := num.Float64()
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, fmt.Errorf("field %q is not an integer: %s", field, num)
	}
	return int64(f), nil
}
