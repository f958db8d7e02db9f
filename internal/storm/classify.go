package storm

import (
	"crypto/sha256"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// report classifies the attempts and builds the report.
func (r *runner) report(keys []*keyRun, elapsed time.Duration) *Report {
	cfg := r.cfg
	rep := &Report{
		URL:          cfg.URL,
		Method:       cfg.Method,
		Keys:         cfg.Keys,
		Dups:         cfg.Dups,
		Concurrency:  cfg.Concurrency,
		Timeout:      cfg.Timeout,
		Retry409:     cfg.Retry409,
		Elapsed:      elapsed,
		Retries:      int(r.retries.Load()),
		StatusCounts: map[int]int{},
	}
	var latencies []time.Duration
	var firstErr error
	for _, k := range keys {
		k.mu.Lock()
		attempts := k.attempts
		k.mu.Unlock()
		kc := classifyKey(k.key, attempts)
		rep.Requests += len(attempts)
		rep.Originals += kc.failure.Originals
		rep.Replays += kc.failure.Replays
		rep.InProgress += kc.failure.InProgress
		rep.TransportErrors += kc.transportErrors
		rep.ServerErrors += kc.serverErrors
		for _, a := range attempts {
			if a.err != nil {
				if firstErr == nil {
					firstErr = a.err
				}
				continue
			}
			rep.Responses++
			rep.StatusCounts[a.status]++
			latencies = append(latencies, a.latency)
		}
		if kc.finals == 0 {
			rep.KeysUnresolved++
		}
		if kc.failure.Reason == "" {
			rep.KeysPassed++
			continue
		}
		rep.KeysFailed++
		if cfg.MaxFailures < 0 || len(rep.Failures) < cfg.MaxFailures {
			rep.Failures = append(rep.Failures, kc.failure)
		}
	}
	rep.Errors = rep.TransportErrors + rep.ServerErrors
	rep.Latency = percentiles(latencies)
	if rep.Responses == 0 && rep.Requests > 0 {
		rep.Error = fmt.Sprintf("no HTTP response: all %d requests failed (first error: %v)", rep.Requests, firstErr)
	}
	return rep
}

// keyClass is the classification of one key's attempts.
type keyClass struct {
	failure         Failure // Reason is empty when the key passed
	finals          int
	transportErrors int
	serverErrors    int
}

// finalResponse identifies a distinct final response.
type finalResponse struct {
	status int
	sum    [sha256.Size]byte
}

// classifyKey applies the verdict rules documented in the package doc.
func classifyKey(key string, attempts []attempt) keyClass {
	var kc keyClass
	f := &kc.failure
	f.Key = key
	f.Statuses = map[int]int{}
	type distinct struct {
		a     attempt
		count int
	}
	var order []finalResponse
	seen := map[finalResponse]*distinct{}
	for _, a := range attempts {
		if a.err != nil {
			kc.transportErrors++
			f.Errors++
			continue
		}
		f.Statuses[a.status]++
		switch {
		case a.replay:
			f.Replays++
		case a.status == http.StatusConflict:
			f.InProgress++
			continue
		case a.status >= 500:
			kc.serverErrors++
			f.Errors++
			continue
		default:
			f.Originals++
		}
		kc.finals++
		id := finalResponse{a.status, a.sum}
		if d, ok := seen[id]; ok {
			d.count++
		} else {
			seen[id] = &distinct{a: a, count: 1}
			order = append(order, id)
		}
	}
	var reasons []string
	if f.Originals > 1 {
		reasons = append(reasons, fmt.Sprintf("executed %d times (%d responses without %s: true)",
			f.Originals, f.Originals, headerReplayed))
	}
	if len(order) > 1 {
		// Most frequent first, then first seen.
		sort.SliceStable(order, func(i, j int) bool { return seen[order[i]].count > seen[order[j]].count })
		var parts []string
		for i, id := range order {
			if i == 3 {
				parts = append(parts, fmt.Sprintf("and %d more", len(order)-3))
				break
			}
			d := seen[id]
			parts = append(parts, fmt.Sprintf("%d %s x%d", id.status, describeBody(d.a), d.count))
		}
		reasons = append(reasons, fmt.Sprintf("divergent: %d distinct final responses: %s",
			len(order), strings.Join(parts, ", ")))
	}
	f.Reason = strings.Join(reasons, "; ")
	return kc
}

// describeBody renders a short, quoted description of a response body.
func describeBody(a attempt) string {
	if a.size == 0 {
		return "(empty body)"
	}
	s := strconv.Quote(string(a.snippet))
	if a.size > int64(len(a.snippet)) {
		s += fmt.Sprintf("...(%d bytes)", a.size)
	}
	return s
}

// percentiles computes nearest-rank latency percentiles.
func percentiles(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p/100*float64(len(ds)))) - 1
		return ds[max(0, min(i, len(ds)-1))]
	}
	return Latency{P50: rank(50), P90: rank(90), P99: rank(99), Max: ds[len(ds)-1]}
}
