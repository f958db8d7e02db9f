package storm

import (
	"fmt"
	"strconv"
	"strings"
)

// The phrases the text and the HTML reports share, so that both name the
// same things the same way.

// answers renders the attempts by class, as the timeline and the charts
// partition them: originals without the 5xx, transport errors without the
// timeouts.
func (r *Report) answers() string {
	s := fmt.Sprintf("%d originals, %d replays, %d in progress, %d retry later, %d 5xx, %d timeouts, %d transport errors",
		r.Originals-r.ServerErrors, r.Replays, r.InProgress, r.RetryLater, r.ServerErrors, r.Timeouts, r.TransportErrors-r.Timeouts)
	if r.RetriedServerErrors > 0 {
		s += fmt.Sprintf(" (%d of the 5xx retried by storm: not executions)", r.RetriedServerErrors)
	}
	return s
}

// commas renders n with thousands separators: 1,604.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// String renders the count as the operations see it: "charges: 800
// operations, 1,604 charges (2.00 each; want 1) != 800 for 800 keys that
// ran; 0 before, 1,604 after".
func (c *Count) String() string {
	switch {
	case !c.Read && c.Error != "":
		return fmt.Sprintf("%s: %s before, unreadable after: %s", c.Field, commas(c.Before), c.Error)
	case !c.Read:
		return fmt.Sprintf("%s: %s before, not read after", c.Field, commas(c.Before))
	}
	each := "-"
	if c.Operations > 0 {
		each = fmt.Sprintf("%.2f", float64(c.Delta())/float64(c.Operations))
	}
	s := fmt.Sprintf("%s: %s operations, %s %s (%s each; want %d)", c.Field, commas(int64(c.Operations)),
		commas(c.Delta()), c.Field, each, c.Want)
	switch {
	case c.Min == c.Max && c.OK():
		s += " = " + commas(c.Min)
	case c.Min == c.Max:
		s += " != " + commas(c.Min)
	case c.OK():
		s += fmt.Sprintf(" within %s to %s", commas(c.Min), commas(c.Max))
	default:
		s += fmt.Sprintf(" outside %s to %s", commas(c.Min), commas(c.Max))
	}
	s += " for " + plural(c.ran, "key") + " that ran"
	if c.maybe > 0 {
		s += fmt.Sprintf(" and %d that may have", c.maybe)
	}
	if c.failed > 0 {
		s += fmt.Sprintf(", the %d failed ones aside", c.failed)
	}
	return s + fmt.Sprintf("; %s before, %s after", commas(c.Before), commas(c.After))
}

// countNote says what a storm without a side-effect count could not
// prove.
func (r *Report) countNote() string {
	switch {
	case r.KeysUnproven > 0:
		return fmt.Sprintf("not checked (no --count-url): %d keys unproven: an attempt whose answer was lost may have run as well; a count (--count-url) or a ledger (idemkey check --ledger) decides them", r.KeysUnproven)
	case r.ReplayOnly > 0:
		return fmt.Sprintf("not checked (no --count-url): %d keys passed on replays alone (their one execution's answer was lost); at most once rests on the answers, and only a side-effect count proves it", r.ReplayOnly)
	default:
		return "not checked (no --count-url): at most once rests on the answers; only a side-effect count proves it"
	}
}

// failWhy says why the verdict is fail.
func (r *Report) failWhy() []string {
	var why []string
	if r.KeysFailed > 0 {
		why = append(why, fmt.Sprintf("%d of %d keys failed", r.KeysFailed, r.Keys))
	}
	for i := range r.Counts {
		if c := &r.Counts[i]; !c.OK() {
			want := commas(c.Min)
			if c.Min != c.Max {
				want += " to " + commas(c.Max)
			}
			if c.failed > 0 {
				want += fmt.Sprintf(" (the %d failed keys aside)", c.failed)
			}
			why = append(why, fmt.Sprintf("%s grew by %s for %s operations, want %s", c.Field, commas(c.Delta()), commas(int64(c.Operations)), want))
		}
	}
	return why
}

// inconclusiveWhy says why the verdict is inconclusive.
func (r *Report) inconclusiveWhy() []string {
	var why []string
	switch {
	case r.Error != "":
		why = append(why, r.Error)
	case r.Interrupted:
		why = append(why, "interrupted")
	}
	if r.KeysInconclusive > 0 && r.Error == "" {
		s := fmt.Sprintf("%d of %d keys inconclusive", r.KeysInconclusive, r.Keys)
		if r.KeysUnproven > 0 {
			s += fmt.Sprintf(", %d of them unproven", r.KeysUnproven)
		}
		why = append(why, s)
	}
	if r.countUnread() && !r.Interrupted {
		why = append(why, "count unreadable after the storm")
	}
	if r.Ledger != nil && r.Ledger.Disagreement != "" {
		why = append(why, r.Ledger.Disagreement)
	}
	return why
}

// rules renders what the rules decided, for those that decided something:
// "at-most-once: 10 unproven; retries-not-final: 20 passed".
func (r *Report) rules() string {
	var parts []string
	for _, rr := range r.Rules {
		var p []string
		if rr.Failed > 0 {
			p = append(p, fmt.Sprintf("%d failed", rr.Failed))
		}
		if rr.Inconclusive > 0 {
			word := "inconclusive"
			switch rr.Name {
			case RuleAtMostOnce:
				word = "unproven"
			case RuleLiveness:
				word = "without a final answer"
			}
			p = append(p, fmt.Sprintf("%d %s", rr.Inconclusive, word))
		}
		if rr.Passed > 0 {
			word := "passed"
			switch {
			case rr.Name == RuleAtMostOnce && r.Ledger != nil:
				word = "proven once by the ledger or the count"
			case rr.Name == RuleAtMostOnce:
				word = "proven once by the count"
			case rr.Name == RuleRetriesNotFinal:
				word = "passed with the 5xx storm retried set aside"
			}
			p = append(p, fmt.Sprintf("%d %s", rr.Passed, word))
		}
		if len(p) > 0 {
			parts = append(parts, rr.Name+": "+strings.Join(p, ", "))
		}
	}
	return strings.Join(parts, "; ")
}
