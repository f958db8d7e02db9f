package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/internal/httpcore"
	"github.com/idemkey/idemkey/redisstore"
)

const inspectAbout = `Shows the idempotency record of KEY. A started record (its operation is
running, or died without an outcome) keeps its label (such as
"POST /v1/payments"), attempt, fingerprint, recovery point and its data,
and the time of the first claim, and holds a lease while its owner lives.
A completed record keeps only the fingerprint, the attempt and the stored
outcome. Both show their TTL. Text from clients (key, label, recovery point,
headers, body) is printed quoted, Go-style, so no control character reaches
the terminal; --json prints it as JSON.

--raw shows the record as Redis holds it instead, field by field, by the
names of the storage specification (docs/spec.md, Spec ` + redisstore.SpecVersion + `):
kind, flags, fingerprint, token, attempt, threshold, recovery_point,
recovery_data, label and created of a started record; kind, flags,
fingerprint, attempt, code and outcome of a completed one, with the outcome
read as a stored HTTP response (version, body_omitted, compressed,
dictionary_id, headers, body); its tombstone; a value it cannot read is
shown as refused, with its bytes.

` + scopeAbout + `

Redis comes from --redis (host:port[/db], or a redis://, rediss:// or
unix:// URL), else $REDIS_URL, else 127.0.0.1:6379.

Exit status: 0 when the record exists (with --raw: the record or its
tombstone), 1 when it does not, 2 on a usage error or when Redis cannot be
reached.
`

// bodyPreview is the most of a stored body the text output shows.
const bodyPreview = 2048

func inspect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("inspect", "[--redis URL] [--prefix idem:] (--scope S | --bearer TOKEN | --authorization V) [--dict FILE]... [--max-response-bytes N] [--raw] [--json] KEY", inspectAbout, stderr)
	var (
		redisURL = redisFlag(fs, "Redis `address`: host:port[/db] or a redis:// or rediss:// URL; default $REDIS_URL, else 127.0.0.1:6379")
		prefix   = fs.String("prefix", "idem:", "the store's key prefix (redisstore.Options.Prefix)")
		names    = addRecordFlags(fs)
		asJSON   = fs.Bool("json", false, "print the record as one JSON object")
		raw      = fs.Bool("raw", false, "show the record as Redis holds it, by the names of docs/spec.md")
		maxResp  = fs.Int("max-response-bytes", httpcore.DefaultMaxResponseBytes, "the middleware's Options.MaxResponseBytes: a stored body that decompresses to more (plus 64 KiB of headers) is shown as corrupt")
		dicts    fileList
	)
	fs.Var(&dicts, "dict", "a zstd dictionary `file` the middleware compresses with (Options.Dictionaries), to decode such bodies; repeatable")
	positional, code, stop := parseInterleaved(fs, args)
	if stop {
		return code
	}
	scope, key, err := names.record(positional)
	if err != nil {
		return usageError(stderr, "inspect", "%v", err)
	}
	addr := redisURL()
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	if _, err := redisOptions(addr); err != nil {
		return usageError(stderr, "inspect", "%v", err)
	}

	if *maxResp <= 0 {
		return usageError(stderr, "inspect", "--max-response-bytes %d: must be positive", *maxResp)
	}
	codec, err := responseCodec(dicts, *maxResp)
	if err != nil {
		return usageError(stderr, "inspect", "%v", err)
	}
	redis.SetLogger(quietRedisLog{}) // a failure to connect is reported once, below
	rdb, err := connect(ctx, addr)
	if err != nil {
		fmt.Fprintf(stderr, "idemkey inspect: %v\n", err)
		return 2
	}
	defer rdb.Close()
	store, err := redisstore.New(rdb, redisstore.Options{Prefix: *prefix})
	if err != nil {
		return usageError(stderr, "inspect", "%v", err)
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if *raw {
		return inspectRaw(lctx, rdb, store, scope, key, *prefix, codec, *asJSON, stdout, stderr)
	}
	rec, err := store.Lookup(lctx, scope, key)
	if errors.Is(err, redisstore.ErrNotFound) {
		fmt.Fprintf(stderr, "idemkey inspect: no record for key %q in scope %q under prefix %q on %s: never claimed, released after a failure, expired, or another scope or prefix\n",
			key, scope, *prefix, redisName(rdb))
		if *asJSON {
			_ = json.NewEncoder(stdout).Encode(notFoundJSON{Found: false, Prefix: *prefix, Scope: scope, Key: key})
		}
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "idemkey inspect: %v\n", err)
		return 2
	}
	out := describeRecord(*prefix, rec, codec)
	if *asJSON {
		err = json.NewEncoder(stdout).Encode(out)
	} else {
		err = out.writeText(stdout, time.Now())
	}
	if err != nil {
		fmt.Fprintf(stderr, "idemkey inspect: %v\n", err)
		return 2
	}
	return 0
}

// parseInterleaved parses flags that may come before and after the
// positional arguments, as in "inspect KEY --json". Everything after "--" is
// positional.
func parseInterleaved(fs *flag.FlagSet, args []string) (positional []string, code int, stop bool) {
	for {
		if code, stop := parseFlags(fs, args); stop {
			return nil, code, true
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, 0, false
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), 0, false
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// recordJSON is a record as inspect shows it; --json prints it as is.
type recordJSON struct {
	Found         bool       `json:"found"`
	Prefix        string     `json:"prefix"`
	Scope         string     `json:"scope"`
	Key           string     `json:"key"`
	Label         string     `json:"label"`
	State         string     `json:"state"`
	Attempt       int        `json:"attempt"`
	Fingerprint   string     `json:"fingerprint"` // hex
	RecoveryPoint string     `json:"recovery_point"`
	RecoveryData  *bytesJSON `json:"recovery_data,omitempty"`
	CreatedAt     *time.Time `json:"created_at,omitempty"` // nil once completed: not kept

	TTLMS      int64         `json:"ttl_ms"`
	LeaseTTLMS int64         `json:"lease_ttl_ms"` // 0 when no lease is held
	Response   *responseJSON `json:"response,omitempty"`
}

type notFoundJSON struct {
	Found  bool   `json:"found"`
	Prefix string `json:"prefix"`
	Scope  string `json:"scope"`
	Key    string `json:"key"`
}

// responseJSON is a stored outcome. HTTP is false for an outcome that is
// not an HTTP response (stored by Store.Do, say): Body is then the raw
// outcome and Headers is empty.
type responseJSON struct {
	Status      int         `json:"status"`
	HTTP        bool        `json:"http"`
	Headers     http.Header `json:"headers,omitempty"`
	BodySize    int         `json:"body_size"`
	BodyOmitted bool        `json:"body_omitted,omitempty"` // the original body was too large to store
	Body        bytesJSON   `json:"body"`
	// Undecoded says why an HTTP response could not be decoded (compressed
	// with a dictionary inspect was not given); Body is then the stored
	// bytes as they are.
	Undecoded string `json:"undecoded,omitempty"`
}

// bytesJSON holds bytes as text when they are UTF-8, else as base64.
type bytesJSON struct {
	Text   *string `json:"text,omitempty"`
	Base64 *string `json:"base64,omitempty"`
}

func newBytesJSON(b []byte) bytesJSON {
	if utf8.Valid(b) {
		s := string(b)
		return bytesJSON{Text: &s}
	}
	s := base64.StdEncoding.EncodeToString(b)
	return bytesJSON{Base64: &s}
}

func describeRecord(prefix string, rec *redisstore.Record, codec *httpcore.ResponseCodec) recordJSON {
	out := recordJSON{
		Found:         true,
		Prefix:        prefix,
		Scope:         rec.Scope,
		Key:           rec.Key,
		Label:         rec.Label,
		State:         string(rec.State),
		Attempt:       rec.Attempt,
		Fingerprint:   hex.EncodeToString([]byte(rec.Fingerprint)),
		RecoveryPoint: rec.RecoveryPoint,
		TTLMS:         rec.TTL.Milliseconds(),
		LeaseTTLMS:    rec.LeaseTTL.Milliseconds(),
	}
	if !rec.CreatedAt.IsZero() {
		at := rec.CreatedAt.UTC()
		out.CreatedAt = &at
	}
	if rec.RecoveryData != nil {
		d := newBytesJSON(rec.RecoveryData)
		out.RecoveryData = &d
	}
	if r := rec.Response; r != nil {
		hr, err := codec.Decode(r.Code, r.Body)
		switch {
		case err == nil:
			out.Response = &responseJSON{Status: hr.Status, HTTP: true, Headers: hr.Header, BodySize: len(hr.Body),
				BodyOmitted: hr.BodyOmitted, Body: newBytesJSON(hr.Body)}
		case errors.Is(err, httpcore.ErrUnknownDictionary):
			out.Response = &responseJSON{Status: r.Code, HTTP: true, BodySize: len(r.Body), Body: newBytesJSON(r.Body),
				Undecoded: err.Error() + "; pass the dictionary with --dict FILE"}
		default:
			out.Response = &responseJSON{Status: r.Code, BodySize: len(r.Body), Body: newBytesJSON(r.Body)}
		}
	}
	return out
}

// writeText writes the record for a terminal. Every string a client or a
// handler chose is quoted (quoteText), so escape sequences in it are shown,
// not run.
func (r recordJSON) writeText(w io.Writer, now time.Time) error {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	row := func(label, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", label, fmt.Sprintf(format, args...))
	}
	completed := r.State == string(redisstore.Completed)
	row("key", "%s", quoteText(r.Key))
	row("scope", "%s", quoteText(r.Scope))
	row("prefix", "%s", quoteText(r.Prefix))
	if !completed {
		row("label", "%s", quoteText(r.Label))
	}
	state := r.State
	switch {
	case completed:
		state += " (retries get the stored response)"
	case r.LeaseTTLMS > 0:
		state += " (lease held: duplicates wait or get 409 until its owner completes, or dies and the lease runs out)"
	default:
		state += " (no lease: its owner died or gave up; the next retry takes it over)"
	}
	row("state", "%s", state)
	attempt := fmt.Sprint(r.Attempt)
	if r.Attempt > 1 {
		attempt += fmt.Sprintf(" (taken over %d time%s)", r.Attempt-1, plural(r.Attempt-1))
	}
	row("attempt", "%s", attempt)
	row("fingerprint", "%s", r.Fingerprint)
	if completed {
		row("kept", "fingerprint, attempt and outcome only (completion drops the label, the recovery point and the created time)")
		row("ttl", "%s (retries replay the outcome until then)", time.Duration(r.TTLMS)*time.Millisecond)
	} else {
		switch {
		case r.RecoveryPoint == "" && r.RecoveryData == nil:
			row("recovery", "none")
		case r.RecoveryData == nil:
			row("recovery", "%s", quoteText(r.RecoveryPoint))
		default:
			row("recovery", "%s, data %s", quoteText(r.RecoveryPoint), r.RecoveryData.preview(200))
		}
		if r.CreatedAt != nil {
			row("created", "%s (%s ago, by the claiming process's clock)", r.CreatedAt.Format(time.RFC3339), now.Sub(*r.CreatedAt).Round(time.Millisecond))
		}
		row("ttl", "%s", time.Duration(r.TTLMS)*time.Millisecond)
		if r.LeaseTTLMS > 0 {
			row("lease", "%s left", time.Duration(r.LeaseTTLMS)*time.Millisecond)
		} else {
			row("lease", "none")
		}
	}
	if resp := r.Response; resp != nil {
		if resp.Undecoded != "" {
			row("response", "%d %s, not decoded: %s", resp.Status, http.StatusText(resp.Status), resp.Undecoded)
			row("stored size", "%d bytes", resp.BodySize)
		} else if resp.HTTP {
			row("response", "%d %s", resp.Status, http.StatusText(resp.Status))
			names := slices.Sorted(maps.Keys(resp.Headers))
			label := "headers"
			for _, k := range names {
				for _, v := range resp.Headers[k] {
					row(label, "%s: %s", headerName(k), quoteText(v))
					label = ""
				}
			}
			if label != "" {
				row(label, "none")
			}
		} else {
			row("response", "code %d (not an HTTP response)", resp.Status)
		}
		if resp.Undecoded == "" {
			size := fmt.Sprintf("%d bytes", resp.BodySize)
			if resp.BodyOmitted {
				size += " (the original body was too large to store; replays get this problem instead)"
			}
			row("body size", "%s", size)
			if resp.BodySize > 0 {
				row("body", "%s", resp.Body.preview(bodyPreview))
			}
		}
	} else if !completed {
		row("response", "none yet")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// quoteText quotes s for a terminal, as Go's %q does: in double quotes,
// with every byte or rune that is not printable escaped (\x1b, \a, \u009b,
// \u202e, \x9b for a byte that is not UTF-8), C0 and C1 controls included.
// Printable non-ASCII text stays as it is.
func quoteText(s string) string { return strconv.Quote(s) }

// headerName returns a header name as it is when it is a valid token, else
// quoted: a handler can set any map key.
func headerName(k string) string {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return quoteText(k)
		}
	}
	if k == "" {
		return `""`
	}
	return k
}

// preview renders the bytes for a terminal, cut after max bytes: text
// quoted (quoteText), other bytes as base64.
func (b bytesJSON) preview(max int) string {
	if b.Base64 != nil {
		s, cut := clip(*b.Base64, max)
		return "base64 " + s + cut
	}
	var s string
	if b.Text != nil {
		s = *b.Text
	}
	s, cut := clip(s, max)
	return quoteText(s) + cut
}

// clip cuts s after max bytes, at a rune boundary, and says how much it cut.
func clip(s string, max int) (string, string) {
	if len(s) <= max {
		return s, ""
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], fmt.Sprintf(" ... (%d more bytes)", len(s)-n)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// fileList is a repeatable flag of file names.
type fileList []string

func (f *fileList) String() string     { return strings.Join(*f, ",") }
func (f *fileList) Set(s string) error { *f = append(*f, s); return nil }

// responseCodec returns a response codec holding the dictionaries in files
// (compressed bodies without one decode anyway), bounded by maxResp as the
// middleware's MaxResponseBytes bounds it.
func responseCodec(files []string, maxResp int) (*httpcore.ResponseCodec, error) {
	var dicts [][]byte
	for _, f := range files {
		d, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--dict: %w", err)
		}
		dicts = append(dicts, d)
	}
	codec, err := httpcore.NewResponseCodec(httpcore.Compression{Dictionaries: dicts, MaxResponseBytes: maxResp})
	if err != nil {
		return nil, fmt.Errorf("--dict: %w", err)
	}
	return codec, nil
}
