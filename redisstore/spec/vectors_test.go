package spec

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/httpcore"
	"github.com/idemkey/idemkey/redisstore"
	"github.com/idemkey/idemkey/redisstore/internal/record"
)

// want is what a vector says a reader makes of it: its fields, or its
// refusal.
func (v *vector) want(t testing.TB) view {
	t.Helper()
	if v.Refused != "" {
		require.Empty(t, v.Fields, "%s: fields and a refusal", v.Name)
		return toView(t, refused(v.Refused))
	}
	require.NotEmpty(t, v.Fields, "%s: neither fields nor a refusal", v.Name)
	return parseView(t, v.Fields)
}

// codecFor returns a response codec holding the dictionaries a vector file
// names, as a reader configured with them decodes.
func codecFor(t testing.TB, f *vectorFile) *httpcore.ResponseCodec {
	t.Helper()
	var dicts [][]byte
	for _, name := range f.Dictionaries {
		d, err := os.ReadFile(filepath.Join(vectorDir, name))
		require.NoError(t, err)
		dicts = append(dicts, d)
	}
	c, err := httpcore.NewResponseCodec(httpcore.Compression{Dictionaries: dicts})
	require.NoError(t, err)
	return c
}

// keysInput is the keys family's input.
type keysInput struct {
	Prefix, Scope, Key, Step Bytes
	Given                    Bytes
	Fingerprint              string
	Code, Attempt            int
}

func (v *vector) input(t testing.TB) keysInput {
	t.Helper()
	var in keysInput
	require.NoError(t, json.Unmarshal(v.Input, &in), v.Name)
	return in
}

// goView is what today's Go decoders make of a vector of a family (the
// keys family: what today's Go functions make of its input).
func goView(t testing.TB, family string, v *vector, codec *httpcore.ResponseCodec) view {
	t.Helper()
	switch family {
	case "record_keys":
		in := v.input(t)
		k := record.NewKeys(string(in.Prefix), string(in.Scope), string(in.Key))
		tag := k.Record()[len(in.Prefix)+1 : len(k.Record())-1]
		return toView(t, map[string]any{"tag": tag, "record": Bytes(k.Record()), "tombstone": Bytes(k.Tombstone()),
			"channel": Bytes(k.Channel()), "legacy_lease": Bytes(k.LegacyLease())})
	case "derived_keys":
		in := v.input(t)
		return toView(t, map[string]any{"derived": record.DerivedKey(string(in.Prefix), string(in.Scope), string(in.Key), string(in.Step))})
	case "fingerprints":
		fp := record.Fingerprint(string(v.input(t).Given))
		return toView(t, map[string]any{"stored": hex.EncodeToString(fp[:])})
	case "records":
		return recordView(t, v.bytes(t))
	case "tombstones":
		return tombstoneView(t, v.bytes(t))
	case "responses":
		return responseView(t, codec, v.bytes(t))
	case "do":
		require.NotNil(t, v.Code, v.Name)
		return doView(t, *v.Code, v.bytes(t))
	case "claim", "legacy", "owned", "lookup", "forget":
		reply, err := parseRESP(v.bytes(t))
		require.NoError(t, err, v.Name)
		return replyView(t, family, reply)
	}
	t.Fatalf("no Go decoder for family %q", family)
	return nil
}

// TestVectorsAreSpecVersion: every vector file is of the version the
// store writes, and lists the families the tests read (a family the tests
// do not know would go unchecked).
func TestVectorsAreSpecVersion(t *testing.T) {
	entries, err := os.ReadDir(vectorDir)
	require.NoError(t, err)
	var jsons []string
	for _, e := range entries {
		if filepath.Ext(e.Name()) == ".json" {
			jsons = append(jsons, e.Name())
		}
	}
	require.ElementsMatch(t, slices.Collect(maps.Keys(vectorFiles)), jsons, "the vector files")
	for name, families := range vectorFiles {
		b, err := os.ReadFile(filepath.Join(vectorDir, name))
		require.NoError(t, err)
		var top map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(b, &top))
		keys := slices.Collect(maps.Keys(top))
		require.ElementsMatch(t, append([]string{"spec", "about"}, families...), slices.DeleteFunc(keys, func(k string) bool { return k == "dictionaries" }), name)
		require.Equal(t, redisstore.SpecVersion, loadVectors(t, name).Spec, name)
	}
}

// TestVectorsDecode: today's decoders make of every golden vector exactly
// the fields it lists, or refuse it as it says. A change that fails here
// changed the format: it must bump the spec's major version and keep
// reading these bytes (docs/spec.md, "Versions").
func TestVectorsDecode(t *testing.T) {
	n := 0
	for name, families := range vectorFiles {
		f := loadVectors(t, name)
		codec := codecFor(t, f)
		for _, family := range families {
			if family == "grpc" {
				continue // grpcmw's own module decodes them (grpcmw TestOutcomeVectors)
			}
			for _, v := range f.Families[family] {
				t.Run(family+"/"+v.Name, func(t *testing.T) {
					require.Equal(t, v.want(t), goView(t, family, &v, codec))
				})
				n++
			}
		}
	}
	require.Greater(t, n, 100)
}

// TestVectorsReencode: every vector that today's code writes is written
// byte for byte from its fields: records, tombstones, stored responses
// (compressed ones up to the compressor's choices: see
// testdata/spec/README.md). Key names, derived keys and fingerprints are
// computed from their input in TestVectorsDecode.
func TestVectorsReencode(t *testing.T) {
	recs := loadVectors(t, "records.json")
	for _, v := range recs.Families["records"] {
		if v.WrittenBy == "" {
			continue
		}
		t.Run("records/"+v.Name, func(t *testing.T) {
			want := v.bytes(t)
			r, err := ParseRecord(want)
			require.NoError(t, err)
			require.Len(t, r.Fingerprint, record.FPLen)
			fp := [record.FPLen]byte(r.Fingerprint)
			var got []byte
			if r.Kind == KindCompleted {
				got = record.AppendCompleted(nil, &fp, int(r.Attempt), int(r.Code), r.Outcome)
			} else {
				got = record.AppendStarted(nil, &fp, string(r.Token), strconv.FormatInt(r.Threshold, 10), &record.Started{
					Attempt: int(r.Attempt), RecoveryPoint: string(r.RecoveryPoint), RecoveryData: r.RecoveryData,
					Label: string(r.Label), CreatedMS: r.Created})
			}
			got[1] = r.Flags // set by watch.lua and release.lua (SETRANGE), kept by claim.lua
			require.Equal(t, want, got)
		})
	}
	for _, v := range recs.Families["tombstones"] {
		if v.WrittenBy == "" {
			continue
		}
		t.Run("tombstones/"+v.Name, func(t *testing.T) {
			in := v.input(t)
			fp, err := hex.DecodeString(in.Fingerprint)
			require.NoError(t, err)
			require.Equal(t, string(v.bytes(t)), record.Tombstone((*[record.FPLen]byte)(fp), in.Code, in.Attempt))
		})
	}

	resps := loadVectors(t, "responses.json")
	codec := codecFor(t, resps)
	plain, err := httpcore.NewResponseCodec(httpcore.Compression{On: true})
	require.NoError(t, err)
	for _, v := range resps.Families["responses"] {
		if v.WrittenBy == "" {
			continue
		}
		t.Run("responses/"+v.Name, func(t *testing.T) {
			want := v.bytes(t)
			f, err := codec.Fields(want)
			require.NoError(t, err)
			h := http.Header{}
			for _, kv := range f.Headers {
				h[kv[0]] = append(h[kv[0]], kv[1])
			}
			if !f.Compressed {
				require.Equal(t, want, (*httpcore.ResponseCodec)(nil).Append(nil, h, f.Body, f.BodyOmitted))
				return
			}
			c := plain
			if f.DictionaryID != 0 {
				c = codec
			}
			got := c.Append(nil, h, f.Body, f.BodyOmitted)
			require.Equal(t, want[0], got[0], "version and flags")
			require.Equal(t, frameHeader(t, want), frameHeader(t, got), "the frame's header: single segment, no checksum, dictionary, content size")
			again, err := codec.Fields(got)
			require.NoError(t, err)
			require.Equal(t, f, again)
			if !bytes.Equal(want, got) {
				t.Logf("the compressor chose other bytes for the same frame (%d bytes, vector %d): the format allows it", len(got), len(want))
			}
		})
	}
}

// frameHeader returns the header of the zstd frame a compressed stored
// response holds (its magic number left out, as stored): descriptor,
// dictionary ID, content size.
func frameHeader(t testing.TB, b []byte) []byte {
	t.Helper()
	var h zstd.Header
	require.NoError(t, h.Decode(append([]byte{0x28, 0xb5, 0x2f, 0xfd}, b[1:]...)))
	require.True(t, h.SingleSegment)
	require.False(t, h.HasCheckSum)
	require.True(t, h.HasFCS)
	return b[1 : 1+h.HeaderSize-4]
}
