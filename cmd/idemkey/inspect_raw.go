package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkey/idemkey/internal/httpcore"
	"github.com/idemkey/idemkey/redisstore"
	"github.com/idemkey/idemkey/redisstore/spec"
)

// rawJSON is what inspect --raw shows: the keys of a record as Redis holds
// them, field by field, by the names of docs/spec.md (§13).
type rawJSON struct {
	Spec string `json:"spec"`
	Name string `json:"name"`
	// Type is the record key's Redis type: string (Spec 1), hash (the
	// format of idemkey 0.1), none, or another type (not idemkey's).
	Type string `json:"type"`
	// PTTLMS is the key's PTTL as Redis gives it: -1 without an expiry,
	// -2 when there is no key.
	PTTLMS     int64 `json:"pttl_ms"`
	LeaseTTLMS int64 `json:"lease_ttl_ms"`
	// Record is the record's fields, or {"refused": why, "hex": bytes}.
	Record any `json:"record,omitempty"`
	// Response is a completed record's outcome read as a stored HTTP
	// response, or {"refused": why, "error": text} when it is not one.
	Response any `json:"response,omitempty"`
	// Legacy is a record of idemkey 0.1: its hash fields, and its lease
	// key's PTTL.
	Legacy *legacyJSON `json:"legacy,omitempty"`
	// Tombstone is the tombstone's fields, null without one.
	Tombstone any `json:"tombstone"`
}

type legacyJSON struct {
	Fields      map[string]spec.Bytes `json:"fields"`
	LeasePTTLMS int64                 `json:"lease_pttl_ms"`
}

// errNoKeys says neither the record nor its tombstone exists.
var errNoKeys = errors.New("no record and no tombstone")

// readRaw reads the keys of the record of scope and key as they are, with
// plain commands (no script: it reads what no version of the scripts
// would), and decodes them by the specification.
func readRaw(ctx context.Context, rdb *redis.Client, store *redisstore.Store, scope, key string, codec *httpcore.ResponseCodec) (*rawJSON, error) {
	name := store.RecordName(scope, key)
	out := &rawJSON{Spec: redisstore.SpecVersion, Name: name}
	pipe := rdb.Pipeline()
	typ := pipe.Type(ctx, name)
	pttl := pipe.Do(ctx, "PTTL", name) // as Redis gives it: -1, -2 kept
	tomb := pipe.Get(ctx, name+":t")
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out.Type = typ.Val()
	out.PTTLMS, _ = pttl.Val().(int64)
	if b, err := tomb.Bytes(); err == nil {
		if ts, err := spec.ParseTombstone(b); err == nil {
			out.Tombstone = ts
		} else {
			out.Tombstone = refusal("malformed", b)
		}
	}
	switch out.Type {
	case "none":
		if out.Tombstone == nil {
			return out, errNoKeys
		}
	case "string":
		v, err := rdb.Get(ctx, name).Bytes()
		if err != nil {
			return nil, err
		}
		out.describe(v, codec)
	case "hash":
		fields, err := rdb.HGetAll(ctx, name).Result()
		if err != nil {
			return nil, err
		}
		lease, err := rdb.PTTL(ctx, name+":lease").Result()
		if err != nil {
			return nil, err
		}
		out.Legacy = &legacyJSON{Fields: map[string]spec.Bytes{}, LeasePTTLMS: max(lease.Milliseconds(), 0)}
		for k, v := range fields {
			out.Legacy.Fields[k] = spec.Bytes(v)
		}
	}
	return out, nil
}

// refusal is a value the specification says to refuse, with its bytes.
func refusal(why string, b []byte) map[string]string {
	return map[string]string{"refused": why, "hex": hex.EncodeToString(b)}
}

// describe decodes a record's value into out.
func (out *rawJSON) describe(v []byte, codec *httpcore.ResponseCodec) {
	rec, err := spec.ParseRecord(v)
	switch {
	case errors.Is(err, spec.ErrUnknownVersion):
		out.Record = refusal("unknown-version", v)
		return
	case err != nil:
		out.Record = refusal("malformed", v)
		return
	}
	out.Record = rec
	if rec.State() == "started" {
		out.LeaseTTLMS = max(out.PTTLMS-rec.Threshold, 0)
	}
	if rec.Kind != spec.KindCompleted {
		return
	}
	resp, err := codec.Fields(rec.Outcome)
	switch {
	case err == nil:
		out.Response = resp
	case errors.Is(err, httpcore.ErrUnknownDictionary):
		out.Response = map[string]string{"refused": "unknown-dictionary", "error": err.Error() + "; pass the dictionary with --dict FILE"}
	case errors.Is(err, httpcore.ErrUnknownResponseVersion):
		out.Response = map[string]string{"refused": "unknown-version", "error": "not a stored HTTP response of a version this release reads (Store.Do and grpcmw store other encodings)"}
	default:
		out.Response = map[string]string{"refused": "malformed", "error": "not a stored HTTP response (Store.Do and grpcmw store other encodings)"}
	}
}

// writeRawText writes what readRaw read, one field a row, by the
// specification's names. Bytes are quoted (quoteText), so no control
// character reaches the terminal.
func writeRawText(w io.Writer, r *rawJSON) error {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	row := func(label, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", label, fmt.Sprintf(format, args...))
	}
	bytesRow := func(label string, v []byte, max int) {
		s, cut := clip(string(v), max)
		row(label, "%s%s", quoteText(s), cut)
	}
	row("name", "%s", quoteText(r.Name))
	row("spec", "%s (docs/spec.md)", r.Spec)
	switch r.Type {
	case "string":
		if r.PTTLMS == -1 {
			row("type", "string, no expiry (pttl -1)")
		} else {
			row("type", "string, pttl %d ms", r.PTTLMS)
		}
	case "none":
		row("type", "none (no record)")
	case "hash":
		row("type", "hash (pttl %d ms): a record of idemkey 0.1 (docs/spec.md §12)", r.PTTLMS)
	default:
		row("type", "%s: not an idemkey record", r.Type)
	}
	switch rec := r.Record.(type) {
	case *spec.Record:
		row("kind", "%s", rec.Kind)
		state := rec.State()
		if state == "started" {
			state += fmt.Sprintf(" (lease %d ms left: pttl - threshold)", r.LeaseTTLMS)
		}
		row("state", "%s", state)
		row("flags", "%s", quoteText(string([]byte{rec.Flags})))
		row("fingerprint", "%x", rec.Fingerprint)
		if rec.Kind == spec.KindCompleted {
			row("attempt", "%d", rec.Attempt)
			row("code", "%d", rec.Code)
			bytesRow("outcome", rec.Outcome, 200)
			row("", "(%d bytes)", len(rec.Outcome))
			break
		}
		row("token", "%x", rec.Token)
		row("attempt", "%d", rec.Attempt)
		row("threshold", "%d", rec.Threshold)
		bytesRow("recovery_point", rec.RecoveryPoint, 200)
		bytesRow("recovery_data", rec.RecoveryData, 200)
		bytesRow("label", rec.Label, 200)
		created := strconv.FormatInt(rec.Created, 10)
		if rec.Created > 0 {
			created += " (" + time.UnixMilli(rec.Created).UTC().Format(time.RFC3339Nano) + ")"
		}
		row("created", "%s", created)
	case map[string]string:
		row("record", "refused: %s (docs/spec.md §2.2: a reader refuses, never guesses)", rec["refused"])
		v, _ := hex.DecodeString(rec["hex"])
		bytesRow("bytes", v, 200)
	}
	switch resp := r.Response.(type) {
	case *httpcore.EncodedResponse:
		row("response.version", "%d", resp.Version)
		row("response.body_omitted", "%t", resp.BodyOmitted)
		row("response.compressed", "%t", resp.Compressed)
		row("response.dictionary_id", "%d", resp.DictionaryID)
		label := "response.headers"
		for _, h := range resp.Headers {
			row(label, "%s: %s", headerName(h[0]), quoteText(h[1]))
			label = ""
		}
		if label != "" {
			row(label, "none")
		}
		bytesRow("response.body", resp.Body, bodyPreview)
		row("", "(%d bytes)", len(resp.Body))
	case map[string]string:
		row("response", "refused: %s: %s", resp["refused"], resp["error"])
	}
	if r.Legacy != nil {
		for _, k := range slices.Sorted(maps.Keys(r.Legacy.Fields)) {
			bytesRow("legacy."+k, r.Legacy.Fields[k], 200)
		}
		row("legacy.lease", "pttl %d ms", r.Legacy.LeasePTTLMS)
	}
	switch ts := r.Tombstone.(type) {
	case nil:
		row("tombstone", "none")
	case *spec.Tombstone:
		row("tombstone", "fingerprint32 %x, code %d, attempt %d", ts.Fingerprint32, ts.Code, ts.Attempt)
	case map[string]string:
		row("tombstone", "refused: %s, bytes %s", ts["refused"], ts["hex"])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// printRaw prints r as text or JSON.
func printRaw(w io.Writer, r *rawJSON, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		return enc.Encode(r)
	}
	return writeRawText(w, r)
}

// inspectRaw is inspect --raw.
func inspectRaw(ctx context.Context, rdb *redis.Client, store *redisstore.Store, scope, key, prefix string,
	codec *httpcore.ResponseCodec, asJSON bool, stdout, stderr io.Writer) int {
	r, err := readRaw(ctx, rdb, store, scope, key, codec)
	if errors.Is(err, errNoKeys) {
		fmt.Fprintf(stderr, "idemkey inspect: no record and no tombstone for key %q in scope %q under prefix %q on %s (%s)\n",
			key, scope, prefix, redisName(rdb), r.Name)
		if asJSON {
			_ = printRaw(stdout, r, true)
		}
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "idemkey inspect: %v\n", err)
		return 2
	}
	if err := printRaw(stdout, r, asJSON); err != nil {
		fmt.Fprintf(stderr, "idemkey inspect: %v\n", err)
		return 2
	}
	return 0
}
