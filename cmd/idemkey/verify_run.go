package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemkey/idemkey/internal/httpflag"

	"github.com/idemkey/idemkey/idemclient"
)

// exchange is one request and what came back.
type exchange struct {
	status int
	header http.Header
	body   []byte
	err    error
	sentAt time.Time
	doneAt time.Time // when the answer was read
}

// replayed reports whether the answer says it is a stored outcome.
func (e *exchange) replayed() bool {
	return e.err == nil && strings.EqualFold(strings.TrimSpace(e.header.Get(idemclient.HeaderReplayed)), "true")
}

// inProgress reports whether the answer is a 409 that is not a replay.
func (e *exchange) inProgress() bool {
	return e.err == nil && e.status == http.StatusConflict && !e.replayed()
}

// original reports whether the answer is an execution, as storm counts
// them: a response that is not a replay, a 409, or one of the "retry
// later" statuses (408, 425, 429, 503).
func (e *exchange) original() bool {
	if e.err != nil || e.replayed() {
		return false
	}
	switch e.status {
	case http.StatusConflict, http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return false
	}
	return true
}

// describe says what came back, in a few words: the status, whether it is
// a replay, the content type and the body's size; or the error.
func (e *exchange) describe() string {
	if e.err != nil {
		return "no answer (" + e.err.Error() + ")"
	}
	return statusOf(e) + " (" + e.details() + ")"
}

// details gives the content type and the size of the body.
func (e *exchange) details() string {
	s := fmt.Sprintf("%d bytes", len(e.body))
	if ct := e.header.Get("Content-Type"); ct != "" {
		s = safeText(ct) + ", " + s
	}
	return s
}

// excerpt is the start of the body, quoted, for evidence.
func (e *exchange) excerpt() string {
	s, cut := clip(string(e.body), 160)
	return quoteText(s) + cut
}

// request is one request a check sends.
type request struct {
	key   string // the key; "" with noKey
	noKey bool
	body  []byte
	url   string // "" for the target
	fault bool   // carry --fault-header
}

// verifier runs the checks of one verifyConfig.
type verifier struct {
	cfg    verifyConfig
	client *http.Client
	policy idemclient.Policy
	sent   int // requests sent, for the report
	mu     sync.Mutex
}

// runVerify runs every check against cfg's endpoint. It returns an error,
// and no report, when the endpoint or the counter cannot be reached at the
// start, or ctx ends.
func runVerify(ctx context.Context, cfg verifyConfig) (*verifyReport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// A fresh connection per request: net/http resends a request that
	// carries Idempotency-Key on its own when a reused connection breaks,
	// which would hide a lost answer and add attempts no check counted.
	tr.DisableKeepAlives = true
	tr.MaxConnsPerHost = 0
	defer tr.CloseIdleConnections()
	v := &verifier{
		cfg: cfg,
		client: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
		policy: idemclient.Policy{MaxRetryAfter: cfg.timeout},
	}
	rep := &verifyReport{
		Method: cfg.method, URL: cfg.target.String(), KeyHeader: cfg.keyHeader,
		Parallel: cfg.parallel, Started: time.Now().UTC(),
	}
	if err := v.run(ctx, rep); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", err)
	}
	rep.Elapsed = time.Since(rep.Started)
	rep.Requests = v.sent
	rep.Verdict = verdictPass
	for _, c := range rep.Checks {
		if c.Result == resultFail {
			rep.Verdict = verdictFail
		}
	}
	return rep, nil
}

// send sends one request, bounded by --timeout, and reads the answer.
func (v *verifier) send(ctx context.Context, r request) (e exchange) {
	ctx, cancel := context.WithTimeout(ctx, v.cfg.timeout)
	defer cancel()
	target := r.url
	if target == "" {
		target = v.cfg.target.String()
	}
	e.sentAt = time.Now()
	defer func() { e.doneAt = time.Now() }() // the result e, after the body is read
	req, err := http.NewRequestWithContext(ctx, v.cfg.method, target, bytes.NewReader(r.body))
	if err != nil {
		e.err = err
		return e
	}
	for name, values := range v.cfg.header {
		req.Header[name] = slices.Clone(values)
	}
	if v.cfg.host != "" {
		req.Host = v.cfg.host
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "idemkey-verify")
	}
	if !r.noKey {
		req.Header.Set(v.cfg.keyHeader, r.key)
	}
	if r.fault {
		req.Header.Set(v.cfg.faultName, v.cfg.faultValue)
	}
	v.mu.Lock()
	v.sent++
	v.mu.Unlock()
	resp, err := v.client.Do(req)
	if err != nil {
		e.err = unwrapURLError(err)
		return e
	}
	defer resp.Body.Close()
	e.status, e.header = resp.StatusCode, resp.Header
	e.body, err = io.ReadAll(io.LimitReader(resp.Body, verifyMaxBody+1))
	switch {
	case err != nil:
		e.err = fmt.Errorf("%d, then reading the body: %w", resp.StatusCode, unwrapURLError(err))
	case len(e.body) > verifyMaxBody:
		e.err = fmt.Errorf("%d with a body over %d bytes", resp.StatusCode, verifyMaxBody)
	}
	return e
}

// unwrapURLError drops the "Post "http://…": " prefix: the URL is in the
// report's heading.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// untilFinal sends r, and sends it again after each 409 (not a replay)
// once Retry-After has passed (backoff without one), until another answer,
// a transport error, --timeout or verifyMaxAttempts. It returns every
// attempt; the last is final unless it is a 409.
func (v *verifier) untilFinal(ctx context.Context, r request) []exchange {
	deadline := time.Now().Add(v.cfg.timeout)
	var attempts []exchange
	for n := 1; ; n++ {
		e := v.send(ctx, r)
		attempts = append(attempts, e)
		if !e.inProgress() || n >= verifyMaxAttempts {
			return attempts
		}
		d := v.policy.Delay(n, e.header.Get("Retry-After"), time.Now())
		if time.Now().Add(d).After(deadline) {
			return attempts
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return attempts
		case <-t.C:
		}
	}
}

// counter reads --count-field from --count-url; ok is false without them.
func (v *verifier) counter(ctx context.Context) (n int64, ok bool, err error) {
	if v.cfg.countURL == "" {
		return 0, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, v.cfg.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.cfg.countURL, nil)
	if err != nil {
		return 0, true, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "idemkey-verify")
	resp, err := v.client.Do(req)
	if err != nil {
		return 0, true, fmt.Errorf("--count-url: %w", unwrapURLError(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, true, fmt.Errorf("--count-url: reading the body: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, true, fmt.Errorf("--count-url: status %d", resp.StatusCode)
	}
	n, err = httpflag.CountField(b, v.cfg.countField)
	if err != nil {
		return 0, true, fmt.Errorf("--count-url: %w", err)
	}
	return n, true, nil
}

// counts follows the side-effect counter through the run.
type counts struct {
	on    bool
	start int64
	last  int64
	steps []countStep
}

// countStep is how much the counter moved during one step of the run.
type countStep struct {
	Step  string `json:"step"`
	Delta int64  `json:"delta"`
}

// mark reads the counter after step and records how much it moved.
func (v *verifier) mark(ctx context.Context, c *counts, step string) (int64, error) {
	if !c.on {
		return 0, nil
	}
	n, _, err := v.counter(ctx)
	if err != nil {
		return 0, err
	}
	d := n - c.last
	c.steps = append(c.steps, countStep{Step: step, Delta: d})
	c.last = n
	return d, nil
}

// run runs every check in order and fills rep.
func (v *verifier) run(ctx context.Context, rep *verifyReport) error {
	cfg := v.cfg
	var cnt counts
	if n, on, err := v.counter(ctx); err != nil {
		return err
	} else if on {
		cnt = counts{on: true, start: n, last: n}
		rep.Count = &countReport{URL: cfg.countURL, Field: cfg.countField, Before: n}
	}
	first := true
	// reachable turns the first request's transport error into
	// errUnreachable: nothing was checked.
	reachable := func(e exchange) error {
		if first && e.err != nil {
			return fmt.Errorf("%w: %s %s: %v", errUnreachable, cfg.method, cfg.target, e.err)
		}
		first = false
		return nil
	}
	obs := &rep.Observed

	// 1. Missing key.
	c := rep.add(checkMissingKey, "missing key")
	if cfg.optionalKey {
		c.skip("--optional-key: the endpoint allows requests without a key; nothing was sent")
	} else {
		e := v.send(ctx, request{noKey: true, body: cfg.body})
		if err := reachable(e); err != nil {
			return err
		}
		obs.MissingKey = observe(&e)
		c.clause("400 without "+cfg.keyHeader, e.err == nil && e.status == http.StatusBadRequest, e.describe())
		if e.err == nil && e.status != http.StatusBadRequest {
			c.evidence("body: " + e.excerpt())
		}
		c.Summary = statusOf(&e) + " without " + cfg.keyHeader
		if ct := e.header.Get("Content-Type"); e.err == nil && ct != "" {
			c.Summary += " (" + safeText(ct) + ")"
		}
	}
	if _, err := v.mark(ctx, &cnt, "missing key"); err != nil {
		return err
	}

	// 2. Malformed keys.
	c = rep.add(checkMalformedKey, "malformed key")
	long := idemclient.NewKey() + "-" + strings.Repeat("x", verifyLongKey-len(idemclient.NewKey())-1)
	ctl := idemclient.NewKey()
	ctl = ctl[:8] + "\t" + ctl[9:]
	var parts []string
	for _, k := range []struct{ what, key string }{
		{fmt.Sprintf("%d-character key", len(long)), long},
		{"key with a control character (tab)", ctl},
	} {
		e := v.send(ctx, request{key: k.key, body: cfg.body})
		if err := reachable(e); err != nil {
			return err
		}
		obs.MalformedKey = append(obs.MalformedKey, malformedObservation{Key: k.what, Answer: observe(&e)})
		c.clause("400 for a "+k.what, e.err == nil && e.status == http.StatusBadRequest, e.describe())
		parts = append(parts, fmt.Sprintf("%s: %s", k.what, statusOf(&e)))
	}
	c.Summary = strings.Join(parts, "; ")
	if _, err := v.mark(ctx, &cnt, "malformed key"); err != nil {
		return err
	}

	// 3. Concurrency.
	key := idemclient.NewKey()
	copies := v.concurrently(ctx, key)
	if err := reachable(copies[0][0]); err != nil {
		return err
	}
	c = rep.add(checkConcurrency, "concurrency")
	c.Key = key
	orig := v.checkConcurrency(c, copies, obs)
	if _, err := v.mark(ctx, &cnt, "concurrency"); err != nil {
		return err
	}

	// 4. Replay.
	c = rep.add(checkReplay, "replay")
	c.Key = key
	replay := v.untilFinal(ctx, request{key: key, body: cfg.body})
	last := &replay[len(replay)-1]
	obs.Replay = observe(last)
	checkReplayOf(c, "", orig, last)
	// replayedFor notes how long after the original's answer an identical
	// replay still came back: the least the retention can be.
	replayedFor := func(e *exchange) {
		if orig != nil && e.replayed() && diffAnswers(orig, e, true) == "" {
			obs.ReplayedFor = max(obs.ReplayedFor, e.sentAt.Sub(orig.doneAt))
		}
	}
	replayedFor(last)
	if _, err := v.mark(ctx, &cnt, "replay"); err != nil {
		return err
	}

	// 5. Mismatch.
	c = rep.add(checkMismatch, "mismatch")
	c.Key = key
	alt, change, altErr := v.cfg.altBody, "--alt-body", error(nil)
	if alt == nil {
		alt, change, altErr = changeOneValue(cfg.body)
	}
	if altErr != nil {
		c.skip(fmt.Sprintf("no --alt-body, and %v", altErr))
		obs.Fingerprint.Body = "not tested: " + c.Summary
	} else {
		e := v.send(ctx, request{key: key, body: alt})
		obs.Mismatch = observe(&e)
		moved, err := v.mark(ctx, &cnt, "mismatch")
		if err != nil {
			return err
		}
		c.clause("422 for the same key with another body ("+change+")", e.err == nil && e.status == http.StatusUnprocessableEntity, e.describe())
		if e.err == nil && e.status != http.StatusUnprocessableEntity {
			c.evidence("body: " + e.excerpt())
		}
		if cnt.on {
			c.clause("the counter did not move", moved == 0, fmt.Sprintf("%s %+d", cfg.countField, moved))
		}
		again := v.untilFinal(ctx, request{key: key, body: cfg.body})
		after := &again[len(again)-1]
		sub := &check{}
		checkReplayOf(sub, "", orig, after)
		ok := sub.Result != resultFail
		detail := after.describe()
		if !ok {
			detail = failedDetails(sub)
		}
		c.clause("the original request still replays the original outcome", ok, detail)
		replayedFor(after)
		c.Summary = fmt.Sprintf("%s for a changed body (%s); the original request still replays: %s", statusOf(&e), change, yesNo(ok))
		switch {
		case e.err != nil:
			obs.Fingerprint.Body = "not known: the changed body got no answer"
		case e.status == http.StatusUnprocessableEntity:
			obs.Fingerprint.Body = "covered: a changed body (" + change + ") got 422"
		case e.replayed():
			obs.Fingerprint.Body = "not covered: a changed body (" + change + ") got the stored answer"
		case e.original():
			obs.Fingerprint.Body = fmt.Sprintf("unclear: a changed body (%s) ran again, %s: the key did not hold it back", change, statusOf(&e))
		default:
			obs.Fingerprint.Body = fmt.Sprintf("unclear: a changed body (%s) got %s", change, statusOf(&e))
		}
		if _, err := v.mark(ctx, &cnt, "mismatch: the original again"); err != nil {
			return err
		}
	}

	// 6. Side effects.
	c = rep.add(checkSideEffects, "side effects")
	if !cnt.on {
		c.skip("no --count-url: the side effect itself was not counted")
	} else {
		total := cnt.last - cnt.start
		var steps []string
		for _, s := range cnt.steps {
			steps = append(steps, fmt.Sprintf("%s %+d", s.Step, s.Delta))
		}
		c.clause("the counter rose by exactly 1", total == 1,
			fmt.Sprintf("%s %d -> %d (%+d): %s", cfg.countField, cnt.start, cnt.last, total, strings.Join(steps, ", ")))
		c.Summary = fmt.Sprintf("%s %d -> %d: %+d", cfg.countField, cnt.start, cnt.last, total)
	}

	// The fingerprint probes: observations, not checks.
	if err := v.probes(ctx, key, orig, &cnt, obs); err != nil {
		return err
	}

	// 7. A lost response.
	c = rep.add(checkLostResponse, "lost response")
	if cfg.faultName == "" {
		c.skip("no --fault-header")
	} else if err := v.lostResponse(ctx, c, &cnt, obs); err != nil {
		return err
	}
	if rep.Count != nil {
		rep.Count.After, rep.Count.Steps = cnt.last, cnt.steps
	}
	return nil
}

// concurrently sends --parallel copies of one keyed request at once, each
// retried after 409s until final, and returns every copy's attempts.
func (v *verifier) concurrently(ctx context.Context, key string) [][]exchange {
	copies := make([][]exchange, v.cfg.parallel)
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	for i := range copies {
		ready.Add(1)
		done.Go(func() {
			ready.Done()
			<-start
			copies[i] = v.untilFinal(ctx, request{key: key, body: v.cfg.body})
		})
	}
	ready.Wait()
	close(start)
	done.Wait()
	return copies
}

// checkConcurrency judges the copies and returns the original answer the
// later checks compare with: the one original, or else the first final
// answer (nil if there was none).
func (v *verifier) checkConcurrency(c *check, copies [][]exchange, obs *observations) *exchange {
	var originals, replays, conflicts int
	var noRetryAfter, other, unfinished []string
	var orig, firstFinal *exchange
	originalStatuses := map[int]int{}
	retryAfter := map[string]int{}
	finals := make([]*exchange, len(copies))
	for i, attempts := range copies {
		for j := range attempts {
			e := &attempts[j]
			where := fmt.Sprintf("copy %d attempt %d", i+1, j+1)
			switch {
			case e.original():
				originals++
				originalStatuses[e.status]++
				if orig == nil {
					orig = e
				}
			case e.replayed():
				replays++
			case e.inProgress():
				conflicts++
				ra := e.header.Get("Retry-After")
				if _, ok := idemclient.ParseRetryAfter(ra, e.sentAt); ok {
					retryAfter[ra]++
				} else {
					noRetryAfter = append(noRetryAfter, fmt.Sprintf("%s: 409 with Retry-After %s", where, quoteText(ra)))
				}
			default:
				other = append(other, fmt.Sprintf("%s: %s", where, e.describe()))
			}
		}
		last := &attempts[len(attempts)-1]
		if !last.original() && !last.replayed() {
			unfinished = append(unfinished, fmt.Sprintf("copy %d: %d attempts, the last %s", i+1, len(attempts), statusOf(last)))
			continue
		}
		finals[i] = last
		if firstFinal == nil {
			firstFinal = last
		}
	}
	obs.Concurrency = &concurrencyObservation{Copies: len(copies), Originals: originals, Replays: replays,
		InProgress: conflicts, RetryAfter: retryAfter, Other: len(other)}
	if orig != nil {
		obs.Original = observe(orig)
	}

	c.clause("exactly one original", originals == 1, fmt.Sprintf("%d%s", originals, cond(originals > 0, " ("+tallyStatuses(originalStatuses)+")")))
	rest := slices.Concat(other, noRetryAfter)
	if originals > 1 {
		rest = append([]string{fmt.Sprintf("%d more originals", originals-1)}, rest...)
	}
	c.clause("the rest are replays or 409s with Retry-After", len(rest) == 0,
		fmt.Sprintf("%d replays, %d 409s", replays, conflicts)+cond(len(rest) > 0, "; not so: "+listSome(rest, 5)))
	ref := orig
	if ref == nil {
		ref = firstFinal
	}
	var diffs []string
	var locations int
	for i, f := range finals {
		if f == nil || ref == nil || f == ref {
			continue
		}
		if d := diffAnswers(ref, f, false); d != "" {
			diffs = append(diffs, fmt.Sprintf("copy %d: %s", i+1, d))
		} else if f.header.Get("Location") != ref.header.Get("Location") {
			locations++
		}
	}
	c.clause("every final answer identical (status and body)", len(diffs) == 0 && ref != nil,
		cond(ref != nil, fmt.Sprintf("%d final answers, %d differ", len(copies)-len(unfinished), len(diffs)), "no final answer")+
			cond(len(diffs) > 0, ": "+listSome(diffs, 2)))
	c.clause("409s retried after Retry-After until final", len(unfinished) == 0,
		fmt.Sprintf("%d 409s retried", conflicts)+cond(len(unfinished) > 0, fmt.Sprintf("; no final answer within %s: %s", v.cfg.timeout, listSome(unfinished, 3))))
	if locations > 0 {
		c.evidence(fmt.Sprintf("%d final answers differ from the original in Location only (see the replay check)", locations))
	}
	if orig != nil && (orig.status < 200 || orig.status > 299) {
		c.evidence(fmt.Sprintf("note: the original answered %d, so the checks exercised that answer, not a success; check --body and -H (body: %s)", orig.status, orig.excerpt()))
	}
	c.Summary = fmt.Sprintf("%d copies at once: %d original%s%s, %d replays, %d 409s%s",
		len(copies), originals, cond(originals != 1, "s"), cond(originals > 0, " ("+tallyStatuses(originalStatuses)+")"), replays, conflicts,
		cond(conflicts > 0, " (retried after Retry-After)"))
	return ref
}

// tallyStatuses writes status counts as "201" or "201 x19, 500 x1".
func tallyStatuses(m map[int]int) string {
	codes := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(codes))
	for i, code := range codes {
		parts[i] = strconv.Itoa(code) + cond(m[code] > 1, fmt.Sprintf(" x%d", m[code]))
	}
	return strings.Join(parts, ", ")
}

// checkReplayOf judges got as a replay of orig: marked replayed, with
// orig's status, body and Location.
func checkReplayOf(c *check, what string, orig, got *exchange) {
	prefix := cond(what != "", what+": ")
	if orig == nil {
		c.clause(prefix+"identical to the original", false, "no original answer to compare with (see concurrency)")
		return
	}
	c.clause(prefix+"marked "+idemclient.HeaderReplayed+": true", got.replayed(), got.describe())
	d := diffAnswers(orig, got, true)
	c.clause(prefix+"identical status, body and Location", got.err == nil && d == "", cond(d == "", fmt.Sprintf("%d, %d-byte body, Location %s", got.status, len(got.body), locationOf(got)))+d)
	if c.Summary == "" {
		c.Summary = fmt.Sprintf("%s; status, body and Location identical: %s", got.describe(), yesNo(got.err == nil && d == ""))
	}
}

// diffAnswers describes how b differs from a: status, body (the first
// differing byte) and, with location, the Location header; "" when they
// are the same.
func diffAnswers(a, b *exchange, location bool) string {
	if a.err != nil || b.err != nil {
		if b.err != nil {
			return "no answer: " + b.err.Error()
		}
		return "the original got no answer"
	}
	var d []string
	if a.status != b.status {
		d = append(d, fmt.Sprintf("status %d, not %d", b.status, a.status))
	}
	if s := diffBytes(a.body, b.body); s != "" {
		d = append(d, s)
	}
	if location {
		la, lb := a.header.Values("Location"), b.header.Values("Location")
		if !slices.Equal(la, lb) {
			d = append(d, fmt.Sprintf("Location %s, not %s", locationOf(b), locationOf(a)))
		}
	}
	return strings.Join(d, "; ")
}

func locationOf(e *exchange) string {
	if e.err != nil {
		return "unknown"
	}
	vs := e.header.Values("Location")
	if len(vs) == 0 {
		return "none"
	}
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = safeText(v)
	}
	return strings.Join(q, ", ")
}

// probes finds out whether the fingerprint covers the query and whether a
// re-indented body is the same request. They judge nothing: a server may
// choose either way.
func (v *verifier) probes(ctx context.Context, key string, orig *exchange, cnt *counts, obs *observations) error {
	fp := &obs.Fingerprint
	if orig == nil {
		fp.Query, fp.Canonical = "not tested: no original answer", "not tested: no original answer"
		return nil
	}
	u := *v.cfg.target
	u.RawQuery = cond(u.RawQuery != "", u.RawQuery+"&") + queryProbe
	e := v.send(ctx, request{key: key, body: v.cfg.body, url: u.String()})
	moved, err := v.mark(ctx, cnt, "probe: query")
	if err != nil {
		return err
	}
	what := "the same key with ?" + queryProbe
	switch got := probeAnswer(&e, orig, moved, cnt.on); {
	case e.err == nil && e.status == http.StatusUnprocessableEntity:
		fp.Query = "covered: " + what + " got 422" + got
	case e.err == nil && e.replayed():
		fp.Query = "not covered: " + what + " got the stored answer" + got
	case e.original():
		fp.Query = "unclear: " + what + " ran again, " + statusOf(&e) + got + ": the key did not hold it back (the query may be part of the key's scope)"
	default:
		fp.Query = "unclear: " + what + " got " + statusOf(&e) + got
	}

	re, err := reformat(v.cfg.body)
	if err != nil {
		fp.Canonical = "not tested: " + err.Error()
		return nil
	}
	e = v.send(ctx, request{key: key, body: re})
	if moved, err = v.mark(ctx, cnt, "probe: re-indented body"); err != nil {
		return err
	}
	what = "the body re-indented with its members reordered"
	switch got := probeAnswer(&e, orig, moved, cnt.on); {
	case e.err == nil && e.replayed():
		fp.Canonical = "yes: " + what + " got the stored answer" + got
	case e.err == nil && e.status == http.StatusUnprocessableEntity:
		fp.Canonical = "no, the body's bytes are hashed: " + what + " got 422" + got
	default:
		fp.Canonical = "unclear: " + what + " got " + statusOf(&e) + got
	}
	return nil
}

// probeAnswer describes a probe's answer: its content type and size,
// whether it was identical to the original, and how far the counter moved.
func probeAnswer(e, orig *exchange, moved int64, counted bool) string {
	if e.err != nil {
		return ""
	}
	s := " (" + e.details()
	if e.status != http.StatusUnprocessableEntity {
		s += cond(diffAnswers(orig, e, false) == "", ", identical to the original", ", not the original answer")
	}
	if counted {
		s += fmt.Sprintf("; counter %+d", moved)
	}
	return s + ")"
}

// lostResponse runs the lost-response check on a fresh key.
func (v *verifier) lostResponse(ctx context.Context, c *check, cnt *counts, obs *observations) error {
	key := idemclient.NewKey()
	c.Key = key
	before := cnt.last
	first := v.send(ctx, request{key: key, body: v.cfg.body, fault: true})
	lost := first.err != nil
	c.clause(fmt.Sprintf("the first attempt, with %s: %s, gets no answer", v.cfg.faultName, v.cfg.faultValue), lost,
		cond(lost, first.describe(), "it was answered: "+first.describe()+"; does the server honour the fault header?"))
	retry := v.untilFinal(ctx, request{key: key, body: v.cfg.body})
	last := &retry[len(retry)-1]
	c.clause("the retry without it gets the replay", last.replayed(),
		last.describe()+cond(len(retry) > 1, fmt.Sprintf(" (after %d 409s)", len(retry)-1)))
	obs.LostResponse = &lostObservation{First: observe(&first), Retry: observe(last)}
	if _, err := v.mark(ctx, cnt, "lost response"); err != nil {
		return err
	}
	summary := fmt.Sprintf("first attempt: %s; retry: %s", statusOf(&first), statusOf(last))
	if cnt.on {
		moved := cnt.last - before
		c.clause("the counter rose by exactly 1 for the key", moved == 1, fmt.Sprintf("%s %+d", v.cfg.countField, moved))
		summary += fmt.Sprintf("; %s %+d", v.cfg.countField, moved)
	}
	c.Summary = summary
	return nil
}
