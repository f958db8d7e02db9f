package spec

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/httpcore"
	"github.com/idemkey/idemkey/redisstore/internal/record"
)

// vectorDir holds the golden vectors, frozen: see its README.md.
var vectorDir = filepath.Join("..", "..", "testdata", "spec")

// vector is one golden vector. Every family has a name, the bytes (hex)
// and either the fields a reader decodes them to or the refusal it must
// give; the keys family has its inputs in Input instead of bytes.
type vector struct {
	Name  string `json:"name"`
	About string `json:"about,omitempty"`
	// WrittenBy names what writes exactly these bytes today ("" when
	// nothing does any more: decoded, never re-encoded).
	WrittenBy string `json:"written_by,omitempty"`
	Hex       string `json:"hex,omitempty"`
	// Script and Varies are for replies: the script that replies, and
	// the indices of the reply's elements that depend on the clock (a
	// PTTL), compared by type only against a live Redis.
	Script string `json:"script,omitempty"`
	Varies []int  `json:"varies,omitempty"`
	// Code is the record's code, for outcomes (whose encoding depends on
	// it for Store.Do and gRPC).
	Code *int64 `json:"code,omitempty"`
	// Input is the keys family's input.
	Input   json.RawMessage `json:"input,omitempty"`
	Fields  json.RawMessage `json:"fields,omitempty"`
	Refused string          `json:"refused,omitempty"`
}

// bytes returns the vector's bytes.
func (v *vector) bytes(t testing.TB) []byte {
	t.Helper()
	b, err := hex.DecodeString(v.Hex)
	require.NoError(t, err, v.Name)
	return b
}

// vectorFile is one file of vectors: its families by name.
type vectorFile struct {
	Spec         string              `json:"spec"`
	About        string              `json:"about"`
	Dictionaries []string            `json:"dictionaries,omitempty"`
	Families     map[string][]vector `json:"-"`
}

// vectorFiles are the files of testdata/spec and the families each holds.
var vectorFiles = map[string][]string{
	"keys.json":      {"record_keys", "derived_keys", "fingerprints"},
	"records.json":   {"records", "tombstones"},
	"responses.json": {"responses"},
	"outcomes.json":  {"do", "grpc"},
	"replies.json":   {"claim", "legacy", "owned", "lookup", "forget"},
}

// loadVectors reads one vector file.
func loadVectors(t testing.TB, name string) *vectorFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(vectorDir, name))
	require.NoError(t, err)
	var f vectorFile
	require.NoError(t, json.Unmarshal(b, &f), name)
	var all map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &all), name)
	f.Families = map[string][]vector{}
	for _, fam := range vectorFiles[name] {
		var vs []vector
		require.Contains(t, all, fam, "%s has no %s", name, fam)
		require.NoError(t, json.Unmarshal(all[fam], &vs), "%s %s", name, fam)
		require.NotEmpty(t, vs, "%s %s", name, fam)
		f.Families[fam] = vs
	}
	return &f
}

// view is a decoded value as the specification's JSON views write it,
// parsed back into plain values (numbers kept exact) so that two views
// compare by value, whatever their members' order or escaping.
type view = any

// toView marshals v and parses it back.
func toView(t testing.TB, v any) view {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return parseView(t, b)
}

// parseView parses JSON with its numbers kept as json.Number.
func parseView(t testing.TB, b []byte) view {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var out any
	require.NoError(t, d.Decode(&out), "%s", b)
	return out
}

// refused is the view of a refusal.
func refused(why string) map[string]any { return map[string]any{"refused": why} }

// recordView is what ParseRecord makes of v.
func recordView(t testing.TB, v []byte) view {
	r, err := ParseRecord(v)
	switch {
	case errors.Is(err, ErrUnknownVersion):
		return toView(t, refused("unknown-version"))
	case err != nil:
		return toView(t, refused("malformed"))
	}
	return toView(t, r)
}

// tombstoneView is what ParseTombstone makes of v.
func tombstoneView(t testing.TB, v []byte) view {
	ts, err := ParseTombstone(v)
	if err != nil {
		return toView(t, refused("malformed"))
	}
	return toView(t, ts)
}

// responseView is what the codec makes of a stored HTTP response; it
// checks that Decode agrees with Fields.
func responseView(t testing.TB, c *httpcore.ResponseCodec, b []byte) view {
	t.Helper()
	f, err := c.Fields(b)
	d, derr := c.Decode(200, b)
	switch {
	case errors.Is(err, httpcore.ErrUnknownDictionary):
		require.ErrorIs(t, derr, httpcore.ErrUnknownDictionary)
		return toView(t, refused("unknown-dictionary"))
	case errors.Is(err, httpcore.ErrUnknownResponseVersion):
		require.ErrorIs(t, derr, httpcore.ErrUnknownResponseVersion)
		return toView(t, refused("unknown-version"))
	case err != nil:
		require.ErrorIs(t, err, httpcore.ErrCorruptResponse)
		require.ErrorIs(t, derr, httpcore.ErrCorruptResponse)
		return toView(t, refused("malformed"))
	}
	require.NoError(t, derr)
	require.Equal(t, f.Body, d.Body)
	require.Equal(t, f.BodyOmitted, d.BodyOmitted)
	n := 0
	for _, vs := range d.Header {
		n += len(vs)
	}
	require.Len(t, f.Headers, n)
	seen := map[string]int{}
	for _, h := range f.Headers {
		require.Equal(t, h[1], d.Header[h[0]][seen[h[0]]], "Decode keeps the order of a header's values")
		seen[h[0]]++
	}
	return toView(t, f)
}

// doView is what Store.Do makes of an outcome: its result (code 0), its
// failure's message (code 1), or a refusal.
func doView(t testing.TB, code int64, b []byte) view {
	switch code {
	case 0:
		return toView(t, map[string]any{"result": Bytes(b)})
	case 1:
		return toView(t, map[string]any{"error": Bytes(b)})
	}
	return toView(t, refused("not-do"))
}

// ms is a duration in whole milliseconds.
func ms(d time.Duration) int64 { return d.Milliseconds() }

// claimView is what DecodeClaim makes of a reply of claim.lua or
// legacy.lua.
func claimView(t testing.TB, reply any) view {
	c, ok := record.DecodeClaim(reply)
	if !ok {
		return toView(t, refused("unknown-reply"))
	}
	out := map[string]any{"status": c.Status}
	switch c.Status {
	case record.Owned:
		out["attempt"] = c.Attempt
		out["record"] = nil
		if c.Record != "" {
			out["record"] = recordView(t, []byte(c.Record))
		}
	case record.Replay:
		out["attempt"], out["code"], out["outcome"], out["ttl_ms"] = c.Attempt, c.Code, Bytes(c.Body), ms(c.TTL)
	case record.InProgress:
		out["lease_left_ms"] = ms(c.LeaseLeft)
	case record.Expired:
		out["code"], out["attempt"] = c.Code, c.Attempt
	case record.LegacyReplay:
		out["code"], out["outcome"] = c.Code, Bytes(c.Body)
	}
	return toView(t, out)
}

// ownedView is what DecodeOwned makes of a reply of complete, release,
// extend, checkpoint (and watch, whose 1 and 0 the store reads alike).
func ownedView(t testing.TB, reply any) view {
	owned, ok := record.DecodeOwned(reply)
	if !ok {
		return toView(t, refused("unknown-reply"))
	}
	return toView(t, map[string]any{"owned": owned})
}

// lookupView is what DecodeLookup makes of lookup.lua's reply.
func lookupView(t testing.TB, reply any) view {
	f, ok := record.DecodeLookup(reply)
	if !ok {
		return toView(t, refused("unknown-reply"))
	}
	out := map[string]any{"type": f.Type, "ttl_ms": ms(f.TTL)}
	if f.Type == "string" {
		out["state"], out["lease_ttl_ms"] = f.State(), ms(f.LeaseTTL)
		out["record"] = recordView(t, []byte(reply.([]any)[2].(string)))
	}
	return toView(t, out)
}

// forgetView is what DecodeForget makes of forget.lua's reply.
func forgetView(t testing.TB, reply any) view {
	f, ok := record.DecodeForget(reply)
	if !ok {
		return toView(t, refused("unknown-reply"))
	}
	out := map[string]any{"status": f.Status}
	switch f.Status {
	case record.Forgotten:
		out["record"], out["lease_left_ms"] = nil, ms(f.LeaseLeft)
		if f.Record != "" {
			out["record"] = recordView(t, []byte(f.Record))
		}
	case record.ForgetForeign:
		out["type"] = f.Type
	case record.ForgetRefused:
		out["lease_left_ms"] = ms(f.LeaseLeft)
	}
	return toView(t, out)
}

// replyView decodes a reply of the family's scripts.
func replyView(t testing.TB, family string, reply any) view {
	switch family {
	case "claim", "legacy":
		return claimView(t, reply)
	case "owned":
		return ownedView(t, reply)
	case "lookup":
		return lookupView(t, reply)
	case "forget":
		return forgetView(t, reply)
	}
	t.Fatalf("no reply family %q", family)
	return nil
}
