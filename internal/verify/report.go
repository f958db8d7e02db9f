package verify

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkey/idemkey/idemclient"
)

// The verdicts of a run.
const (
	VerdictPass = "pass"
	VerdictFail = "fail"
)

// Report is the result of a run; "idemkey verify --json" prints it.
type Report struct {
	Method    string        `json:"method"`
	URL       string        `json:"url"`
	KeyHeader string        `json:"key_header"`
	Parallel  int           `json:"parallel"`
	Started   time.Time     `json:"started"`
	Elapsed   time.Duration `json:"-"`
	ElapsedMS int64         `json:"elapsed_ms"`
	Requests  int           `json:"requests"`
	Checks    []*Check      `json:"checks"`
	Observed  observations  `json:"observed"`
	Count     *CountReport  `json:"count,omitempty"`
	Verdict   string        `json:"verdict"` // "pass" or "fail"
	// Tool is what ran the checks (Config.Tool).
	Tool string `json:"-"`

	optionalKey string // Config.Words.OptionalKey
}

// Check is one check of the list: ok when every clause holds.
type Check struct {
	Name     string   `json:"name"`
	Title    string   `json:"title"`
	Result   string   `json:"result"`        // "ok", "fail" or "skip"
	Key      string   `json:"key,omitempty"` // the key the check used, for 'idemkey inspect'; none for the refused ones
	Summary  string   `json:"summary"`
	Clauses  []Clause `json:"clauses,omitempty"`
	Evidence []string `json:"evidence,omitempty"`
}

// Clause is one thing a check requires, and what was seen.
type Clause struct {
	Clause string `json:"clause"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

func (r *Report) add(name, title string) *Check {
	c := &Check{Name: name, Title: title, Result: ResultOK}
	r.Checks = append(r.Checks, c)
	return c
}

func (r *Report) check(name string) *Check {
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func (c *Check) clause(text string, ok bool, detail string) {
	c.Clauses = append(c.Clauses, Clause{Clause: text, OK: ok, Detail: detail})
	if !ok {
		c.Result = ResultFail
	}
}

func (c *Check) skip(why string) {
	c.Result, c.Summary = ResultSkip, why
}

func (c *Check) evidence(s string) { c.Evidence = append(c.Evidence, s) }

// Failed joins the clauses of c that do not hold, each with its detail.
func (c *Check) Failed() string {
	var d []string
	for _, cl := range c.Clauses {
		if !cl.OK {
			d = append(d, cl.Clause+": "+cl.Detail)
		}
	}
	return strings.Join(d, "; ")
}

// answer is what one response looked like.
type answer struct {
	Status      int    `json:"status,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	Replayed    bool   `json:"replayed"`
	Location    string `json:"location,omitempty"`
	RetryAfter  string `json:"retry_after,omitempty"`
	BodyBytes   int    `json:"body_bytes"`
	Error       string `json:"error,omitempty"` // no answer
}

func observe(e *exchange) *answer {
	if e.err != nil {
		return &answer{Error: e.err.Error()}
	}
	return &answer{Status: e.status, ContentType: e.header.Get("Content-Type"), Replayed: e.replayed(),
		Location: e.header.Get("Location"), RetryAfter: e.header.Get("Retry-After"), BodyBytes: len(e.body)}
}

// observations is what the checks saw, for the report.
type observations struct {
	Original     *answer                 `json:"original,omitempty"`
	MissingKey   *answer                 `json:"missing_key,omitempty"`
	MalformedKey []malformedObservation  `json:"malformed_key,omitempty"`
	Concurrency  *concurrencyObservation `json:"concurrency,omitempty"`
	Replay       *answer                 `json:"replay,omitempty"`
	Mismatch     *answer                 `json:"mismatch,omitempty"`
	LostResponse *lostObservation        `json:"lost_response,omitempty"`
	SameCaller   *answer                 `json:"same_caller,omitempty"`  // Config.SameCallerHeader: the answer to another credential
	Scope        *scopeObservation       `json:"scope,omitempty"`        // Config.Kit
	CrashResume  *lostObservation        `json:"crash_resume,omitempty"` // Config.Kit
	TTL          *ttlObservation         `json:"ttl,omitempty"`          // Config.Kit
	Fingerprint  fingerprintObservation  `json:"fingerprint"`
	// ReplayedFor is how long after the original's answer an identical
	// replay still came back.
	ReplayedFor   time.Duration `json:"-"`
	ReplayedForMS int64         `json:"replayed_for_ms"`
}

type malformedObservation struct {
	Key    string  `json:"key"`
	Answer *answer `json:"answer"`
}

type concurrencyObservation struct {
	Copies     int            `json:"copies"`
	Originals  int            `json:"originals"`
	Replays    int            `json:"replays"`
	InProgress int            `json:"in_progress"`           // 409s
	RetryAfter map[string]int `json:"retry_after,omitempty"` // the 409s' valid Retry-After values
	Other      int            `json:"other"`
}

type lostObservation struct {
	First *answer `json:"first"`
	Retry *answer `json:"retry"`
}

// fingerprintObservation says what the fingerprint covers, as far as the
// mismatch check and the probes showed.
type fingerprintObservation struct {
	Body      string `json:"body"`
	Query     string `json:"query"`
	Canonical string `json:"canonical_json"`
}

// CountReport follows the side-effect counter through a run.
type CountReport struct {
	URL    string      `json:"url"`
	Field  string      `json:"field"`
	Before int64       `json:"before"`
	After  int64       `json:"after"`
	Steps  []CountStep `json:"steps"`
}

// WriteJSON writes the report as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	r.ElapsedMS = r.Elapsed.Milliseconds()
	r.Observed.ReplayedForMS = r.Observed.ReplayedFor.Milliseconds()
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func (r *Report) endpoint() string { return r.Method + " " + r.URL }

// WriteText writes the checks for a terminal: one line per check, and the
// clauses of a failed one below it. Text from the server is quoted.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s (key header %s)\n\n", r.Tool, r.endpoint(), r.KeyHeader)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", resultWord(c.Result), c.Title, c.Summary)
		if c.Result == ResultFail {
			for _, cl := range c.Clauses {
				fmt.Fprintf(tw, "\t\t  %s %s: %s\n", resultWord(okResult(cl.OK)), cl.Clause, cl.Detail)
			}
		}
		for _, e := range c.Evidence {
			fmt.Fprintf(tw, "\t\t  %s\n", e)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fp := r.Observed.Fingerprint
	fmt.Fprintf(&b, "\nfingerprint (observed, judged by no check):\n  body   %s\n  query  %s\n  JSON compared canonically: %s\n",
		orNotTested(fp.Body), orNotTested(fp.Query), orNotTested(fp.Canonical))
	fmt.Fprintf(&b, "\nverdict: %s (%s; %d requests in %s)\n", strings.ToUpper(r.Verdict), r.tally(), r.Requests, r.Elapsed.Round(time.Millisecond))
	_, err := io.WriteString(w, b.String())
	return err
}

func okResult(ok bool) string {
	if ok {
		return ResultOK
	}
	return ResultFail
}

func resultWord(result string) string {
	if result == ResultFail {
		return "FAIL"
	}
	return result
}

func orNotTested(s string) string {
	if s == "" {
		return "not tested"
	}
	return s
}

// tally counts the checks by result, as "5 ok, 1 failed (replay), 1 skipped".
func (r *Report) tally() string {
	var ok, skipped int
	var failed []string
	for _, c := range r.Checks {
		switch c.Result {
		case ResultOK:
			ok++
		case ResultSkip:
			skipped++
		default:
			failed = append(failed, c.Title)
		}
	}
	s := fmt.Sprintf("%d ok", ok)
	if len(failed) > 0 {
		s += fmt.Sprintf(", %d failed (%s)", len(failed), strings.Join(failed, ", "))
	}
	if skipped > 0 {
		s += fmt.Sprintf(", %d skipped", skipped)
	}
	return s
}

// WriteMarkdown writes the idempotency guide's output template ("##
// Idempotency for <endpoint>"), filled in from what the run observed; what
// cannot be seen from outside is marked so, never guessed.
func (r *Report) WriteMarkdown(w io.Writer) error {
	const outside = "not observable from outside"
	var b strings.Builder
	o := r.Observed
	fmt.Fprintf(&b, "## Idempotency for %s\n\n", mdCode(r.endpoint()))

	// Mechanism.
	switch {
	case o.Replay != nil && o.Replay.Replayed:
		fmt.Fprintf(&b, "- Mechanism: Idempotency-Key with stored responses (observed: the key in the %s request header; a repeated request gets the stored response, marked `%s: true`). Where the responses are stored (a table, Redis): %s.\n",
			mdCode(r.KeyHeader), idemclient.HeaderReplayed, outside)
	case o.Concurrency != nil && o.Concurrency.Originals > 1:
		fmt.Fprintf(&b, "- Mechanism: none observed: %d of %d identical requests with one key in %s ran.\n", o.Concurrency.Originals, o.Concurrency.Copies, mdCode(r.KeyHeader))
	default:
		fmt.Fprintf(&b, "- Mechanism: unclear: no stored response was replayed with `%s: true` (key in %s).\n", idemclient.HeaderReplayed, mdCode(r.KeyHeader))
	}

	// Key scope and retention.
	if !r.kitScope(&b) {
		fmt.Fprintf(&b, "- Key scope and retention: %s. Scope: every request of this run carried the same credentials, so keys were not tried across callers (`idemkey storm -H 'Authorization: Bearer …{n}'` can). Retention: ", outside)
		if o.ReplayedFor > 0 {
			fmt.Fprintf(&b, "an identical replay still came back %s after the original answer; how long outcomes are kept: %s.\n", o.ReplayedFor.Round(time.Millisecond), outside)
		} else {
			fmt.Fprintf(&b, "%s.\n", outside)
		}
	}

	if c := r.check(CheckSameCaller); c != nil && c.Result != ResultSkip {
		fmt.Fprintf(&b, "  - the same caller with another credential (a refreshed token), same key: %s%s\n", mdText(c.Summary),
			cond(c.Result == ResultFail, " (**the scope follows the credential, not the caller**)", ""))
	}

	// Fingerprint.
	fp := o.Fingerprint
	var covers []string
	for _, part := range []struct{ name, obs string }{{"body", fp.Body}, {"query", fp.Query}} {
		if strings.HasPrefix(part.obs, "covered") {
			covers = append(covers, part.name)
		}
	}
	fmt.Fprintf(&b, "- Fingerprint: %s, as far as the checks showed%s; method, path and headers: not tested.\n",
		cond(len(covers) > 0, strings.Join(covers, " and "), "neither body nor query"),
		cond(strings.HasPrefix(fp.Canonical, "yes"), "; JSON bodies compared canonically (whitespace and member order do not count)"))
	fmt.Fprintf(&b, "  - body: %s\n  - query: %s\n  - JSON compared canonically: %s\n",
		mdText(orNotTested(fp.Body)), mdText(orNotTested(fp.Query)), mdText(orNotTested(fp.Canonical)))

	// Responses.
	replay := statusWord(o.Replay) + " replay"
	if o.Replay != nil && o.Replay.Replayed {
		replay += fmt.Sprintf(" (marked `%s: true`)", idemclient.HeaderReplayed)
	}
	fmt.Fprintf(&b, "- Responses: %s / %s / %s mismatch / %s missing\n",
		replay, inProgressWord(o.Concurrency), statusWord(o.Mismatch), statusWord(o.MissingKey))
	fmt.Fprintf(&b, "  - replay: %s\n", mdText(describeAnswer(o.Replay)))
	if c := o.Concurrency; c != nil {
		if c.InProgress > 0 {
			var ras []string
			for ra, n := range c.RetryAfter {
				ras = append(ras, fmt.Sprintf("`Retry-After: %s` ×%d", mdText(ra), n))
			}
			fmt.Fprintf(&b, "  - in progress: 409 seen %d times in %d concurrent copies, retried until final; %s\n", c.InProgress, c.Copies,
				cond(len(ras) > 0, strings.Join(ras, ", "), "without a valid Retry-After"))
		} else {
			fmt.Fprintf(&b, "  - in progress: no 409 seen: of %d concurrent copies, %d ran and %d got the stored response (the server holds duplicates until the first attempt ends, or it ended first)\n",
				c.Copies, c.Originals, c.Replays)
		}
	}
	fmt.Fprintf(&b, "  - mismatch: %s\n", mdText(describeAnswer(o.Mismatch)))
	if o.MissingKey != nil {
		fmt.Fprintf(&b, "  - missing key: %s\n", mdText(describeAnswer(o.MissingKey)))
	} else {
		b.WriteString("  - missing key: not tested (" + r.optionalKey + ")\n")
	}
	for _, m := range o.MalformedKey {
		fmt.Fprintf(&b, "  - malformed key, %s: %s\n", m.Key, mdText(describeAnswer(m.Answer)))
	}
	if l := o.LostResponse; l != nil {
		fmt.Fprintf(&b, "  - lost response: first attempt %s; retry %s\n", mdText(describeAnswer(l.First)), mdText(describeAnswer(l.Retry)))
	}

	// Downstream keys.
	fmt.Fprintf(&b, "- Downstream keys: %s.\n", outside)

	// Tests.
	b.WriteString("- Tests: ")
	var parts []string
	for _, name := range []string{CheckConcurrency, CheckReplay, CheckMismatch} {
		if c := r.check(name); c != nil {
			parts = append(parts, c.Title+" "+resultWord(c.Result))
		}
	}
	if c := r.check(CheckCrashResume); c != nil {
		parts = append(parts, c.Title+" "+resultWord(c.Result)+cond(c.Result == ResultSkip, " ("+c.Summary+")"))
	} else {
		parts = append(parts, "crash-resume "+outside+" (it needs the server killed mid-request)")
	}
	fmt.Fprintf(&b, "%s. Every check of `%s`:\n", strings.Join(parts, ", "), r.Tool)
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "  - %s %s: %s\n", resultWord(c.Result), c.Title, mdText(c.Summary))
		if c.Result == ResultFail {
			for _, cl := range c.Clauses {
				if !cl.OK {
					fmt.Fprintf(&b, "    - FAIL %s: %s\n", mdText(cl.Clause), mdText(cl.Detail))
				}
			}
		}
		for _, e := range c.Evidence {
			fmt.Fprintf(&b, "    - %s\n", mdText(e))
		}
	}
	if cr := r.Count; cr != nil {
		var steps []string
		for _, s := range cr.Steps {
			steps = append(steps, fmt.Sprintf("%s %+d", s.Step, s.Delta))
		}
		fmt.Fprintf(&b, "  - side-effect counter %s at %s: %d before, %d after (%s)\n", mdCode(cr.Field), mdCode(cr.URL), cr.Before, cr.After, mdText(strings.Join(steps, ", ")))
	}
	fmt.Fprintf(&b, "- Verdict: **%s** (%s): `%s`, %s, %d requests in %s.\n",
		r.Verdict, r.tally(), r.Tool, r.Started.Format(time.RFC3339), r.Requests, r.Elapsed.Round(time.Millisecond))
	_, err := io.WriteString(w, b.String())
	return err
}

func statusWord(a *answer) string {
	switch {
	case a == nil:
		return "(not tested)"
	case a.Error != "":
		return "(no answer)"
	}
	return fmt.Sprint(a.Status)
}

func inProgressWord(c *concurrencyObservation) string {
	switch {
	case c == nil:
		return "(not tested) in-progress"
	case c.InProgress > 0:
		return "409 in-progress"
	}
	return "no 409 in-progress seen"
}

// describeAnswer describes an answer in a few words.
func describeAnswer(a *answer) string {
	switch {
	case a == nil:
		return "not tested"
	case a.Error != "":
		return "no answer (" + a.Error + ")"
	}
	s := fmt.Sprintf("%d %s", a.Status, http.StatusText(a.Status))
	if a.ContentType != "" {
		s += ", " + a.ContentType
	}
	if a.Replayed {
		s += ", " + idemclient.HeaderReplayed + ": true"
	}
	if a.Location != "" {
		s += ", Location " + a.Location
	}
	return s
}

// mdCode puts s in a Markdown code span, quoted if it has control
// characters.
func mdCode(s string) string {
	q := quoteText(s)
	if q[1:len(q)-1] != s {
		s = q
	}
	return "`" + strings.ReplaceAll(s, "`", "'") + "`"
}

// mdText makes server-chosen text safe in a Markdown list item: control
// characters escaped, Markdown and HTML punctuation backslashed.
func mdText(s string) string {
	q := quoteText(s)
	s = q[1 : len(q)-1]
	s = strings.ReplaceAll(s, `\"`, `"`)
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune("`*_[]<", r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
