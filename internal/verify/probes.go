package verify

import (
	"context"
	"fmt"
	"net/http"

	"github.com/idemkey/idemkey/idemclient"
)

// probes find out what the fingerprint covers, on a fresh key of their own,
// so that what they say draws on no other check's requests: the key's first
// request, then the same key with one JSON value changed (or Config.AltBody),
// with an extra query parameter, and with the body re-indented and its
// members reordered. They judge nothing: a server may choose either way.
func (s *Session) probes(ctx context.Context) (*Check, error) {
	cfg, fp := s.cfg, &s.rep.Observed.Fingerprint
	key := idemclient.NewKey()
	body := s.bodyFor(key)
	first := s.untilFinal(ctx, request{key: key, body: body})
	orig := &first[len(first)-1]
	if _, err := s.mark(ctx, "probe: a key of its own"); err != nil {
		return nil, err
	}
	if !orig.original() {
		why := "not tested: the probes' own first request got " + statusOf(orig) + cond(orig.replayed(), ", a replay of a fresh key")
		fp.Body, fp.Query, fp.Canonical = why, why, why
		return nil, nil
	}

	alt, change, altErr := cfg.AltBody, cfg.Words.AltBody, error(nil)
	if alt == nil {
		alt, change, altErr = changeOneValue(body, cfg.Words.AltBody)
	}
	if altErr != nil {
		fp.Body = fmt.Sprintf("not tested: no %s, and %v", cfg.Words.AltBody, altErr)
	} else {
		e := s.send(ctx, request{key: key, body: alt})
		moved, err := s.mark(ctx, "probe: changed body")
		if err != nil {
			return nil, err
		}
		what := "a changed body (" + change + ")"
		switch got := probeAnswer(&e, orig, moved, s.cnt.on); {
		case e.err != nil:
			fp.Body = "not known: " + what + " got no answer"
		case e.status == http.StatusUnprocessableEntity:
			fp.Body = "covered: " + what + " got 422" + got
		case e.replayed():
			fp.Body = "not covered: " + what + " got the stored answer" + got
		case e.original():
			fp.Body = "unclear: " + what + " ran again, " + statusOf(&e) + got + ": the key did not hold it back"
		default:
			fp.Body = "unclear: " + what + " got " + statusOf(&e) + got
		}
	}

	u := *cfg.URL
	u.RawQuery = cond(u.RawQuery != "", u.RawQuery+"&") + queryProbe
	e := s.send(ctx, request{key: key, body: body, url: u.String()})
	moved, err := s.mark(ctx, "probe: query")
	if err != nil {
		return nil, err
	}
	what := "the same key with ?" + queryProbe
	switch got := probeAnswer(&e, orig, moved, s.cnt.on); {
	case e.err == nil && e.status == http.StatusUnprocessableEntity:
		fp.Query = "covered: " + what + " got 422" + got
	case e.err == nil && e.replayed():
		fp.Query = "not covered: " + what + " got the stored answer" + got
	case e.original():
		fp.Query = "unclear: " + what + " ran again, " + statusOf(&e) + got + ": the key did not hold it back (the query may be part of the key's scope)"
	default:
		fp.Query = "unclear: " + what + " got " + statusOf(&e) + got
	}

	re, err := reformat(body)
	if err != nil {
		fp.Canonical = "not tested: " + err.Error()
		return nil, nil
	}
	e = s.send(ctx, request{key: key, body: re})
	if moved, err = s.mark(ctx, "probe: re-indented body"); err != nil {
		return nil, err
	}
	what = "the body re-indented with its members reordered"
	switch got := probeAnswer(&e, orig, moved, s.cnt.on); {
	case e.err == nil && e.replayed():
		fp.Canonical = "yes: " + what + " got the stored answer" + got
	case e.err == nil && e.status == http.StatusUnprocessableEntity:
		fp.Canonical = "no, the body's bytes are hashed: " + what + " got 422" + got
	default:
		fp.Canonical = "unclear: " + what + " got " + statusOf(&e) + got
	}
	return nil, nil
}

// probeAnswer describes a probe's answer: its content type and size,
// whether it was identical to the probes' own original, and how far the
// counter moved.
func probeAnswer(e, orig *exchange, moved int64, counted bool) string {
	if e.err != nil {
		return ""
	}
	s := " (" + e.details()
	if e.status != http.StatusUnprocessableEntity {
		s += cond(diffAnswers(orig, e, false) == "", ", identical to the key's first answer", ", not the key's first answer")
	}
	if counted {
		s += fmt.Sprintf("; counter %+d", moved)
	}
	return s + ")"
}
