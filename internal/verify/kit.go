package verify

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemkey/idemkey/idemclient"
)

// sameCaller: the first caller presenting another credential (a refreshed
// token, Config.SameCallerHeader) with the concurrency check's key gets
// the first answer replayed, and nothing runs again: the scope is the
// caller, not the credential.
func (s *Session) sameCaller(ctx context.Context) (*Check, error) {
	cfg := s.cfg
	c := s.rep.add(CheckSameCaller, "same caller")
	if cfg.SameCallerHeader == nil {
		c.skip("no " + cfg.Words.SameCaller + ": the key was not tried with another credential of the same caller")
		return c, nil
	}
	c.Key = s.key
	if s.orig == nil {
		c.clause("the same caller with another credential compared with its first answer", false, "no original answer to compare with (see concurrency)")
		return c, nil
	}
	tries := s.untilFinal(ctx, request{key: s.key, body: s.bodyFor(s.key), header: cfg.SameCallerHeader})
	e := &tries[len(tries)-1]
	moved, err := s.mark(ctx, "same caller: another credential")
	if err != nil {
		return nil, err
	}
	s.rep.Observed.SameCaller = observe(e)
	sub := &Check{}
	checkReplayOf(sub, "", s.orig, e)
	ok := sub.Result != ResultFail
	c.clause("the same caller with another credential gets the first answer replayed", ok, cond(ok, e.describe(), sub.Failed()))
	if s.cnt.on {
		c.clause("nothing ran again", moved == 0, fmt.Sprintf("%s %+d", cfg.CountName, moved))
	}
	var verdict string
	switch {
	case ok:
		verdict = "the first answer, replayed"
	case e.original():
		verdict = "ran again"
		c.evidence("the scope follows the credential, not the caller: a client that refreshes its token between two tries runs the operation twice. " +
			"With idemkey's middleware, set Options.Scope to the authenticated caller (a user or account ID): " +
			"the default scope hashes the Authorization (or X-API-Key) header")
	case e.err == nil && e.status == http.StatusUnprocessableEntity:
		verdict = "422"
		c.evidence("the credential takes part in the fingerprint: is its header in Options.FingerprintHeaders?")
	case e.err == nil && (e.status == http.StatusUnauthorized || e.status == http.StatusForbidden):
		verdict = statusOf(e)
		c.evidence(fmt.Sprintf("is %s a valid credential of the same caller?", cfg.Words.SameCaller))
	default:
		verdict = statusOf(e)
	}
	c.Summary = "the same caller with another credential: " + statusOf(e) + cond(verdict != statusOf(e), ", "+verdict)
	return c, nil
}

// scope: another caller's request with the concurrency check's key never
// gets the first caller's answer; it runs for that caller, whose retry
// replays its own answer, and the first caller still gets its own.
func (s *Session) scope(ctx context.Context) (*Check, error) {
	cfg := s.cfg
	c := s.rep.add(CheckScope, "scope")
	if cfg.OtherHeader == nil {
		c.skip("no " + cfg.Words.OtherHeader + ": keys were not tried across callers")
		return c, nil
	}
	c.Key = s.key
	if s.orig == nil {
		c.clause("another caller's request compared with the first caller's", false, "no original answer to compare with (see concurrency)")
		return c, nil
	}
	body := s.bodyFor(s.key)
	other := s.untilFinal(ctx, request{key: s.key, body: body, header: cfg.OtherHeader})
	e := &other[len(other)-1]
	moved, err := s.mark(ctx, "scope: another caller")
	if err != nil {
		return nil, err
	}
	var leak string
	switch {
	case e.err != nil:
	case e.replayed():
		leak = "got a stored answer, " + e.describe() + cond(diffAnswers(s.orig, e, true) == "", ": the first caller's, identical", "")
	case e.status == http.StatusUnprocessableEntity:
		leak = "got 422: the key was compared with the first caller's request, so callers share keys"
	case e.inProgress():
		leak = "got 409: the first caller's key holds it back, so callers share keys"
	}
	c.clause("another caller with the same key does not get the first caller's answer", e.err == nil && leak == "",
		cond(leak != "", leak, e.describe()))
	ran := e.original() && (!s.cnt.on || moved == *cfg.PerRun)
	detail := fmt.Sprintf("%s; %s %+d", statusOf(e), cfg.CountName, moved)
	if e.err == nil && !e.original() && leak == "" {
		detail += fmt.Sprintf("; are %s another valid caller's credentials?", cfg.Words.OtherHeader)
	}
	c.clause("it ran for the other caller: an original answer, "+strings.TrimPrefix(effects(*cfg.PerRun), "exactly "), ran, detail)
	own := "not tried"
	if ran {
		again := s.untilFinal(ctx, request{key: s.key, body: body, header: cfg.OtherHeader})
		sub := &Check{}
		checkReplayOf(sub, "", e, &again[len(again)-1])
		c.clause("the other caller's retry replays its own answer", sub.Result != ResultFail, cond(sub.Result != ResultFail, again[len(again)-1].describe(), sub.Failed()))
		own = yesNo(sub.Result != ResultFail)
	}
	first := s.untilFinal(ctx, request{key: s.key, body: body})
	sub := &Check{}
	checkReplayOf(sub, "", s.orig, &first[len(first)-1])
	c.clause("the first caller still gets its own answer", sub.Result != ResultFail, cond(sub.Result != ResultFail, first[len(first)-1].describe(), sub.Failed()))
	after, err := s.mark(ctx, "scope: replays")
	if err != nil {
		return nil, err
	}
	s.judgeCount(c, after, 0)
	s.rep.Observed.Scope = &scopeObservation{Other: observe(e), Leaked: leak != "", Ran: ran}
	c.Summary = fmt.Sprintf("another caller with the same key: %s; its retry replayed its own answer: %s", statusOf(e), own)
	return c, nil
}

// crashResume: a fresh key's first attempt crashes (Config.Crash) after
// its side effect; a retry completes it, and the side effect happened
// once.
func (s *Session) crashResume(ctx context.Context) (*Check, error) {
	cfg := s.cfg
	c := s.rep.add(CheckCrashResume, "crash-resume")
	if cfg.Crash == nil {
		c.skip("no " + cfg.Words.Crash + ": no attempt was crashed")
		return c, nil
	}
	key := idemclient.NewKey()
	c.Key = key
	before := s.cnt.last
	body := s.bodyFor(key)
	first := s.send(ctx, request{key: key, body: body, crash: true})
	crashed := first.err != nil
	c.clause("the first attempt, crashed by "+cfg.Words.Crash+", gets no answer", crashed,
		cond(crashed, first.describe(), "it was answered: "+first.describe()+"; "+crashHint(&first, cfg.Words.Crash)))
	retry := s.untilFinal(ctx, request{key: key, body: body})
	last := &retry[len(retry)-1]
	after409 := cond(len(retry) > 1, fmt.Sprintf(" (after %d 409s)", len(retry)-1))
	c.clause("a retry completes the request", last.original(), last.describe()+after409+
		cond(last.inProgress(), fmt.Sprintf("; the crashed attempt's key was not handed over within %s", cfg.Timeout)))
	again := s.untilFinal(ctx, request{key: key, body: body})
	sub := &Check{}
	checkReplayOf(sub, "", last, &again[len(again)-1])
	c.clause("the next retry replays that answer", sub.Result != ResultFail, cond(sub.Result != ResultFail, again[len(again)-1].describe(), sub.Failed()))
	if _, err := s.mark(ctx, "crash-resume"); err != nil {
		return nil, err
	}
	summary := fmt.Sprintf("crashed attempt: %s; retry: %s%s", statusOf(&first), statusOf(last), after409)
	if s.cnt.on {
		moved := s.cnt.last - before
		c.clause(effects(*cfg.PerRun)+" for the key, the crashed attempt's included", moved == *cfg.PerRun, fmt.Sprintf("%s %+d", cfg.CountName, moved))
		summary += fmt.Sprintf("; %s %+d", cfg.CountName, moved)
	}
	s.rep.Observed.CrashResume = &lostObservation{First: observe(&first), Retry: observe(last)}
	c.Summary = summary
	return c, nil
}

// crashHint says why a request the crash hook marked was answered: a
// recovery middleware's answer (Gin's), or a hook the handler ignores.
func crashHint(e *exchange, hook string) string {
	goexit := "crash with runtime.Goexit() instead, which no recovery middleware stops: the connection then closes without an answer, as a dying process's would (see " + hook + ")"
	switch {
	case e.status == http.StatusOK && len(e.body) == 0 && !e.replayed():
		return "an empty 200 is what gin.Recovery (which gin.Default() mounts) answers for a handler that panics with http.ErrAbortHandler: " + goexit
	case e.status == http.StatusInternalServerError && !e.replayed():
		return "a 500 is what a recovery middleware (gin.Recovery) answers for a handler that panics: " + goexit
	}
	return "does " + hook + " make the handler crash?"
}

// ttl: every key the store wrote has a TTL.
func (s *Session) ttl(ctx context.Context) (*Check, error) {
	cfg := s.cfg
	c := s.rep.add(CheckTTL, "ttl")
	if cfg.Records == nil {
		c.skip("no " + cfg.Words.Records + ": the records' TTLs were not read")
		return c, nil
	}
	recs, err := cfg.Records(ctx)
	if err != nil {
		c.clause("the records are read", false, err.Error())
		c.Summary = "the records could not be read"
		return c, nil
	}
	where := cond(cfg.RecordsWhere != "", " "+cfg.RecordsWhere)
	if len(recs) == 0 {
		c.clause("the run's records are found", false, "no key"+where+"; is that where the store writes?")
		c.Summary = "no key" + where
		return c, nil
	}
	var none []string
	lo, hi := time.Duration(-1), time.Duration(0)
	for _, r := range recs {
		if r.TTL <= 0 {
			none = append(none, quoteText(r.Key))
			continue
		}
		if lo < 0 || r.TTL < lo {
			lo = r.TTL
		}
		hi = max(hi, r.TTL)
	}
	slices.Sort(none)
	c.clause("every record has a TTL", len(none) == 0,
		fmt.Sprintf("%d keys%s, %d without a TTL", len(recs), where, len(none))+cond(len(none) > 0, ": "+listSome(none, 5)))
	ttls := "none with a TTL"
	if lo >= 0 {
		ttls = "TTL " + lo.Round(time.Second).String() + cond(hi.Round(time.Second) != lo.Round(time.Second), " to "+hi.Round(time.Second).String())
	}
	s.rep.Observed.TTL = &ttlObservation{Keys: len(recs), WithoutTTL: len(none), Min: max(lo, 0), Max: hi}
	c.Summary = fmt.Sprintf("%d keys%s: %s", len(recs), where, ttls) + cond(len(none) > 0, fmt.Sprintf(", %d without one", len(none)))
	return c, nil
}

// scopeObservation is what the scope check saw.
type scopeObservation struct {
	Other  *answer `json:"other"`  // another caller's answer for the same key
	Leaked bool    `json:"leaked"` // it was the first caller's, or held back by it
	Ran    bool    `json:"ran"`    // it ran for the other caller
}

// ttlObservation is what the ttl check saw.
type ttlObservation struct {
	Keys       int           `json:"keys"`
	WithoutTTL int           `json:"without_ttl"`
	Min        time.Duration `json:"min_ns"`
	Max        time.Duration `json:"max_ns"`
}

// kitScope writes the report's scope and retention line from the kit's
// observations, or returns false when there are none.
func (r *Report) kitScope(b *strings.Builder) bool {
	o := r.Observed
	if o.Scope == nil && o.TTL == nil {
		return false
	}
	b.WriteString("- Key scope and retention: ")
	switch sc := o.Scope; {
	case sc == nil:
		b.WriteString("scope: not tested (one caller's credentials only)")
	case sc.Leaked:
		fmt.Fprintf(b, "scope: **not per caller**: another caller's request with the same key %s", mdText(describeAnswer(sc.Other)))
	case sc.Ran:
		fmt.Fprintf(b, "scope: per caller, as observed: another caller's request with the same key ran for that caller (%s)", mdText(describeAnswer(sc.Other)))
	default:
		fmt.Fprintf(b, "scope: unclear: another caller's request with the same key got %s", mdText(describeAnswer(sc.Other)))
	}
	b.WriteString(". Retention: ")
	switch t := o.TTL; {
	case t == nil:
		b.WriteString("the records' TTLs were not read")
	case t.WithoutTTL > 0:
		fmt.Fprintf(b, "**%d of %d records have no TTL** and are kept forever", t.WithoutTTL, t.Keys)
	default:
		fmt.Fprintf(b, "every record has a TTL (%d keys, %s to %s)", t.Keys, t.Min.Round(time.Second), t.Max.Round(time.Second))
	}
	if o.ReplayedFor > 0 {
		fmt.Fprintf(b, "; an identical replay still came back %s after the original answer", o.ReplayedFor.Round(time.Millisecond))
	}
	b.WriteString(".\n")
	return true
}
