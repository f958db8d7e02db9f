package verify

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/idemkey/idemkey/idemclient"
)

// missingKey: the request without the key header gets 400.
func (s *Session) missingKey(ctx context.Context) (*Check, error) {
	cfg, obs := s.cfg, &s.rep.Observed
	c := s.rep.add(CheckMissingKey, "missing key")
	if cfg.OptionalKey {
		c.skip(cfg.Words.OptionalKey + ": the endpoint allows requests without a key; nothing was sent")
	} else {
		e := s.send(ctx, request{noKey: true, body: s.bodyFor("")})
		if err := s.reachable(e); err != nil {
			return nil, err
		}
		obs.MissingKey = observe(&e)
		c.clause("400 without "+cfg.KeyHeader, e.err == nil && e.status == http.StatusBadRequest, e.describe())
		if e.err == nil && e.status != http.StatusBadRequest {
			c.evidence("body: " + e.excerpt())
		}
		c.Summary = statusOf(&e) + " without " + cfg.KeyHeader
		if ct := e.header.Get("Content-Type"); e.err == nil && ct != "" {
			c.Summary += " (" + safeText(ct) + ")"
		}
	}
	moved, err := s.mark(ctx, "missing key")
	if err != nil {
		return nil, err
	}
	if !cfg.OptionalKey {
		s.judgeCount(c, moved, 0)
	}
	return c, nil
}

// malformedKey: an over-long key and a key with a control character each
// get 400.
func (s *Session) malformedKey(ctx context.Context) (*Check, error) {
	obs := &s.rep.Observed
	c := s.rep.add(CheckMalformedKey, "malformed key")
	long := idemclient.NewKey() + "-" + strings.Repeat("x", longKey-len(idemclient.NewKey())-1)
	ctl := idemclient.NewKey()
	ctl = ctl[:8] + "\t" + ctl[9:]
	var parts []string
	for _, k := range []struct{ what, key string }{
		{fmt.Sprintf("%d-character key", len(long)), long},
		{"key with a control character (tab)", ctl},
	} {
		e := s.send(ctx, request{key: k.key, body: s.bodyFor(k.key)})
		if err := s.reachable(e); err != nil {
			return nil, err
		}
		obs.MalformedKey = append(obs.MalformedKey, malformedObservation{Key: k.what, Answer: observe(&e)})
		c.clause("400 for a "+k.what, e.err == nil && e.status == http.StatusBadRequest, e.describe())
		parts = append(parts, fmt.Sprintf("%s: %s", k.what, statusOf(&e)))
	}
	c.Summary = strings.Join(parts, "; ")
	moved, err := s.mark(ctx, "malformed key")
	if err != nil {
		return nil, err
	}
	s.judgeCount(c, moved, 0)
	return c, nil
}

// concurrency: Config.Parallel copies of one keyed request at once.
func (s *Session) concurrency(ctx context.Context) (*Check, error) {
	s.key = idemclient.NewKey()
	copies := s.concurrently(ctx, s.key)
	if err := s.reachable(copies[0][0]); err != nil {
		return nil, err
	}
	c := s.rep.add(CheckConcurrency, "concurrency")
	c.Key = s.key
	s.orig = s.checkConcurrency(c, copies)
	moved, err := s.mark(ctx, "concurrency")
	if err != nil {
		return nil, err
	}
	s.judgeCount(c, moved, 1)
	if o, per := s.rep.Observed.Concurrency, *s.cfg.PerRun; s.cfg.Kit && s.cnt.on && per > 0 && moved == per && o.Originals > 1 {
		c.evidence(fmt.Sprintf("%s rose by %d, yet %d answers were not marked %s: true: are replays sent without that header?",
			s.cfg.CountName, per, o.Originals, idemclient.HeaderReplayed))
	}
	return c, nil
}

// concurrently sends Config.Parallel copies of one keyed request at once,
// each retried after 409s until final, and returns every copy's attempts.
func (s *Session) concurrently(ctx context.Context, key string) [][]exchange {
	copies := make([][]exchange, s.cfg.Parallel)
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	for i := range copies {
		ready.Add(1)
		done.Go(func() {
			ready.Done()
			<-start
			copies[i] = s.untilFinal(ctx, request{key: key, body: s.bodyFor(key)})
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
func (s *Session) checkConcurrency(c *Check, copies [][]exchange) *exchange {
	obs := &s.rep.Observed
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
		fmt.Sprintf("%d 409s retried", conflicts)+cond(len(unfinished) > 0, fmt.Sprintf("; no final answer within %s: %s", s.cfg.Timeout, listSome(unfinished, 3))))
	if locations > 0 {
		c.evidence(fmt.Sprintf("%d final answers differ from the original in Location only (see the replay check)", locations))
	}
	if orig != nil && (orig.status < 200 || orig.status > 299) {
		c.evidence(fmt.Sprintf("note: the original answered %d, so the checks exercised that answer, not a success; check %s (body: %s)", orig.status, s.cfg.Words.Request, orig.excerpt()))
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

// replay: the same request once more gets the original, marked replayed.
func (s *Session) replay(ctx context.Context) (*Check, error) {
	c := s.rep.add(CheckReplay, "replay")
	c.Key = s.key
	replay := s.untilFinal(ctx, request{key: s.key, body: s.bodyFor(s.key)})
	last := &replay[len(replay)-1]
	s.rep.Observed.Replay = observe(last)
	checkReplayOf(c, "", s.orig, last)
	s.replayedFor(last)
	moved, err := s.mark(ctx, "replay")
	if err != nil {
		return nil, err
	}
	s.judgeCount(c, moved, 0)
	return c, nil
}

// replayedFor notes how long after the original's answer an identical
// replay still came back: the least the retention can be.
func (s *Session) replayedFor(e *exchange) {
	obs := &s.rep.Observed
	if s.orig != nil && e.replayed() && diffAnswers(s.orig, e, true) == "" {
		obs.ReplayedFor = max(obs.ReplayedFor, e.sentAt.Sub(s.orig.doneAt))
	}
}

// mismatch: the same key with another body gets 422 and changes nothing.
func (s *Session) mismatch(ctx context.Context) (*Check, error) {
	cfg, obs := s.cfg, &s.rep.Observed
	c := s.rep.add(CheckMismatch, "mismatch")
	c.Key = s.key
	body := s.bodyFor(s.key)
	alt, change, altErr := cfg.AltBody, cfg.Words.AltBody, error(nil)
	if alt == nil {
		alt, change, altErr = changeOneValue(body, cfg.Words.AltBody)
	}
	if altErr != nil {
		c.skip(fmt.Sprintf("no %s, and %v", cfg.Words.AltBody, altErr))
		return c, nil
	}
	e := s.send(ctx, request{key: s.key, body: alt})
	obs.Mismatch = observe(&e)
	moved, err := s.mark(ctx, "mismatch")
	if err != nil {
		return nil, err
	}
	c.clause("422 for the same key with another body ("+change+")", e.err == nil && e.status == http.StatusUnprocessableEntity, e.describe())
	if e.err == nil && e.status != http.StatusUnprocessableEntity {
		c.evidence("body: " + e.excerpt())
	}
	if s.cnt.on {
		c.clause("the counter did not move", moved == 0, fmt.Sprintf("%s %+d", cfg.CountName, moved))
	}
	again := s.untilFinal(ctx, request{key: s.key, body: body})
	after := &again[len(again)-1]
	sub := &Check{}
	checkReplayOf(sub, "", s.orig, after)
	ok := sub.Result != ResultFail
	detail := after.describe()
	if !ok {
		detail = sub.Failed()
	}
	c.clause("the original request still replays the original outcome", ok, detail)
	s.replayedFor(after)
	c.Summary = fmt.Sprintf("%s for a changed body (%s); the original request still replays: %s", statusOf(&e), change, yesNo(ok))
	if _, err := s.mark(ctx, "mismatch: the original again"); err != nil {
		return nil, err
	}
	return c, nil
}

// sideEffects: the counter rose by one run's (Config.PerRun) across the
// checks before.
func (s *Session) sideEffects(context.Context) (*Check, error) {
	c := s.rep.add(CheckSideEffects, "side effects")
	if !s.cnt.on {
		c.skip("no " + s.cfg.Words.Count + ": the side effect itself was not counted")
		return c, nil
	}
	cnt, name := &s.cnt, s.cfg.CountName
	total := cnt.last - cnt.start
	var steps []string
	for _, st := range cnt.steps {
		steps = append(steps, fmt.Sprintf("%s %+d", st.Step, st.Delta))
	}
	per := *s.cfg.PerRun
	c.clause(fmt.Sprintf("the counter rose by exactly %d", per), total == per,
		fmt.Sprintf("%s %d -> %d (%+d): %s", name, cnt.start, cnt.last, total, strings.Join(steps, ", ")))
	c.Summary = fmt.Sprintf("%s %d -> %d: %+d", name, cnt.start, cnt.last, total)
	return c, nil
}

// checkReplayOf judges got as a replay of orig: marked replayed, with
// orig's status, body and Location.
func checkReplayOf(c *Check, what string, orig, got *exchange) {
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

// lostResponse: a fresh key's first answer is lost after the work is done;
// the retry gets the replay, and the work happened once.
func (s *Session) lostResponse(ctx context.Context) (*Check, error) {
	cfg := s.cfg
	c := s.rep.add(CheckLostResponse, "lost response")
	if cfg.Lose == "" {
		c.skip("no " + cfg.Words.Fault)
		return c, nil
	}
	key := idemclient.NewKey()
	c.Key = key
	before := s.cnt.last
	first := s.send(ctx, request{key: key, body: s.bodyFor(key), lose: true})
	lost := first.err != nil
	c.clause("the first attempt, "+cfg.Lose+", gets no answer", lost,
		cond(lost, first.describe(), "it was answered: "+first.describe()+"; "+cfg.LoseHint))
	retry := s.untilFinal(ctx, request{key: key, body: s.bodyFor(key)})
	last := &retry[len(retry)-1]
	c.clause("the retry without it gets the replay", last.replayed(),
		last.describe()+cond(len(retry) > 1, fmt.Sprintf(" (after %d 409s)", len(retry)-1)))
	s.rep.Observed.LostResponse = &lostObservation{First: observe(&first), Retry: observe(last)}
	if _, err := s.mark(ctx, "lost response"); err != nil {
		return nil, err
	}
	summary := fmt.Sprintf("first attempt: %s; retry: %s", statusOf(&first), statusOf(last))
	if s.cnt.on {
		moved := s.cnt.last - before
		c.clause(fmt.Sprintf("the counter rose by exactly %d for the key", *cfg.PerRun), moved == *cfg.PerRun, fmt.Sprintf("%s %+d", cfg.CountName, moved))
		summary += fmt.Sprintf("; %s %+d", cfg.CountName, moved)
	}
	c.Summary = summary
	return c, nil
}
