package spec

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/corpus"
	"github.com/idemkey/idemkey/internal/httpcore"
	"github.com/idemkey/idemkey/internal/redistest"
	"github.com/idemkey/idemkey/redisstore"
)

// nodeEnv makes the Node reader's test fail, rather than skip, without
// node on the PATH (.ci/run sets it).
const nodeEnv = "IDEMKEY_REQUIRE_NODE"

// readerPath is the reader written in Node.js from docs/spec.md alone.
var readerPath = filepath.Join(vectorDir, "reader", "reader.mjs")

// findNode returns node's path, or skips (fails with IDEMKEY_REQUIRE_NODE=1).
func findNode(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("node"); err == nil {
		return p
	}
	if os.Getenv(nodeEnv) == "1" {
		t.Fatalf("node not found on PATH and %s=1", nodeEnv)
	}
	t.Skipf("node not found on PATH (apt-get install nodejs); set %s=1 to fail instead", nodeEnv)
	return ""
}

// runReader runs the Node reader and returns its output lines, parsed.
func runReader(t *testing.T, node string, args ...string) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a bound on a stuck process, not a measure
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{readerPath}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "node reader.mjs %s:\n%s", strings.Join(args, " "), stderr.String())
	var out []map[string]any
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		v, ok := parseView(t, sc.Bytes()).(map[string]any)
		require.True(t, ok, "%s", sc.Bytes())
		out = append(out, v)
	}
	require.NoError(t, sc.Err())
	return out
}

// TestNodeReaderAgrees: the reader written in Node.js from docs/spec.md
// alone (testdata/spec/reader, Node's standard library only) makes of
// every golden vector what Go's decoders make of it, and what the vector
// says; of a few hundred responses Go compresses with and without a
// dictionary (and that other zstd encoders make) what Go decodes; and of records the Go store writes to a
// real Redis, found by their names, the same fields as Go.
func TestNodeReaderAgrees(t *testing.T) {
	node := findNode(t)
	t.Run("vectors", func(t *testing.T) {
		got := runReader(t, node, "vectors", vectorDir)
		n := 0
		for name, families := range vectorFiles {
			f := loadVectors(t, name)
			codec := codecFor(t, f)
			for _, family := range families {
				for _, v := range f.Families[family] {
					n++
					line := findLine(t, got, name, family, v.Name)
					require.Equal(t, v.want(t), line["view"], "%s %s: the Node reader and the vector", family, v.Name)
					if family != "grpc" { // Go's gRPC decoder is grpcmw's, in its own module
						require.Equal(t, goView(t, family, &v, codec), line["view"], "%s %s: the Node reader and Go", family, v.Name)
					}
				}
			}
		}
		require.Len(t, got, n, "one line per vector")
	})
	t.Run("compressed responses", func(t *testing.T) {
		nodeDecodesCompressed(t, node)
	})
	t.Run("live records", func(t *testing.T) {
		nodeReadsLiveRecords(t, node)
	})
}

func findLine(t *testing.T, lines []map[string]any, file, family, name string) map[string]any {
	t.Helper()
	for _, l := range lines {
		if l["file"] == file && l["family"] == family && l["name"] == name {
			return l
		}
	}
	t.Fatalf("the Node reader printed nothing for %s %s %q", file, family, name)
	return nil
}

// nodeDecodesCompressed has the Node reader decode responses compressed by
// today's encoder, which exercise more of zstd than the vectors do: every
// body kind of the corpus, random and repetitive text and binary, one byte
// to three blocks, with a dictionary and without.
func nodeDecodesCompressed(t *testing.T, node string) {
	dir := t.TempDir()
	dict, err := os.ReadFile(filepath.Join(vectorDir, "dict-40000.zdict"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dict-40000.zdict"), dict, 0o644))
	withDict, err := httpcore.NewResponseCodec(httpcore.Compression{Dictionaries: [][]byte{dict}})
	require.NoError(t, err)
	plain, err := httpcore.NewResponseCodec(httpcore.Compression{On: true})
	require.NoError(t, err)

	// With IDEMKEY_LONG=1 (CI), more bodies and the frames of other
	// encoder levels, which cost half a minute under -race.
	long := redistest.IsLong()
	r := rand.New(rand.NewPCG(11, 12))
	var bodies [][]byte
	sizes := []int{1, 100, 5000, 140000}
	for _, k := range corpus.Kinds() {
		bodies = append(bodies, k.Bodies(700, 2)...)
	}
	if long {
		for _, k := range corpus.Kinds() {
			bodies = append(bodies, k.Bodies(701, 6)...)
		}
		sizes = []int{1, 32, 100, 1000, 5000, 40000, 131072, 131073, 300000}
	}
	for _, n := range sizes {
		textual, random, runs := make([]byte, n), make([]byte, n), make([]byte, n)
		for i := range n {
			textual[i] = `abcdefgh {}":,0123`[r.IntN(18)]
			random[i] = byte(r.Uint32())
			runs[i] = byte('a' + (i/(1+r.IntN(50)))%3)
		}
		bodies = append(bodies, textual, random, runs)
	}
	// Frames of other encoder levels too: not what the store writes, but
	// frames a reader must read (§11.2), whose blocks use more of zstd
	// (repeat offsets, RLE, literals in other layouts).
	var others []*zstd.Encoder
	levels := []zstd.EncoderLevel{zstd.SpeedDefault}
	if long {
		levels = append(levels, zstd.SpeedBestCompression)
	}
	for _, level := range levels {
		for _, d := range [][]byte{nil, dict} {
			opts := []zstd.EOption{zstd.WithEncoderLevel(level), zstd.WithEncoderCRC(false), zstd.WithSingleSegment(true)}
			if d != nil {
				opts = append(opts, zstd.WithEncoderDict(d))
			}
			enc, err := zstd.NewWriter(nil, opts...)
			require.NoError(t, err)
			others = append(others, enc)
		}
	}
	var vs []map[string]any
	var encoded [][]byte
	add := func(b []byte, size int) {
		encoded = append(encoded, b)
		vs = append(vs, map[string]any{"name": fmt.Sprintf("%d/%d", len(vs), size), "hex": hex.EncodeToString(b)})
	}
	for i, body := range bodies {
		h := http.Header{"Content-Type": {"application/json"}, "X-Case": {fmt.Sprint(i)}}
		for _, c := range []*httpcore.ResponseCodec{plain, withDict} {
			add(c.Append(nil, h, body, i%7 == 0), len(body))
		}
		if len(body) > 40000 {
			continue // the other levels are slow on large bodies, and smaller ones show their blocks
		}
		raw := (*httpcore.ResponseCodec)(nil).Append(nil, h, body, false)
		for _, enc := range others {
			add(append([]byte{raw[0] | 2}, enc.EncodeAll(raw[1:], nil)[4:]...), len(body))
		}
	}
	doc, err := json.Marshal(map[string]any{"spec": "1.0", "dictionaries": []string{"dict-40000.zdict"}, "responses": vs})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "responses.json"), doc, 0o644))

	got := runReader(t, node, "vectors", dir)
	require.Len(t, got, len(vs))
	compressed := 0
	for i, b := range encoded {
		line := findLine(t, got, "responses.json", "responses", vs[i]["name"].(string))
		require.Equal(t, responseView(t, withDict, b), line["view"], "response %s", vs[i]["name"])
		if b[0]&2 != 0 {
			compressed++
		}
	}
	require.Greater(t, compressed, len(encoded)*2/3, "most of them compressed")
}

// liveCase is a record the Go store writes, for the Node reader to find and
// read.
type liveCase struct {
	name       string
	scope, key string
	outcome    string // how the reader decodes a completed record's outcome: http, do, grpc, or none
}

func nodeReadsLiveRecords(t *testing.T, node string) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const prefix = "spec:live:"
	store, err := redisstore.New(rdb, redisstore.Options{Prefix: prefix, TombstoneRetention: time.Hour})
	require.NoError(t, err)
	dictPath, err := filepath.Abs(filepath.Join(vectorDir, "dict-40000.zdict"))
	require.NoError(t, err)
	dict, err := os.ReadFile(dictPath)
	require.NoError(t, err)
	codec, err := httpcore.NewResponseCodec(httpcore.Compression{Dictionaries: [][]byte{dict}})
	require.NoError(t, err)
	pay := corpus.Payment.Samples(900, 1)[0]

	claim := func(scope, key string) *redisstore.Lease {
		c, err := store.Claim(ctx, redisstore.Request{Scope: scope, Key: key, Fingerprint: "fp of " + key, Label: "POST /v1/payments"})
		require.NoError(t, err)
		require.NotNil(t, c.Lease)
		return c.Lease
	}
	cases := []liveCase{
		{"running, checkpointed", "acct_42", "order-1", "none"},
		{"completed, an HTTP response compressed with the dictionary", "acct_42", "order-2", "http"},
		{"released", "acct_42", "order-3", "none"},
		{"Store.Do's result", "worker", "job-4", "do"},
		{"Store.Do's failure", "worker", "job-5", "do"},
		{"a negative code", "acct_42", "order-6", "none"},
		{"a scope and key that are not UTF-8", "acct_\xff", "key\x00\xfe", "none"},
	}
	l := claim(cases[0].scope, cases[0].key)
	require.NoError(t, l.Checkpoint(ctx, "charged", []byte{0, 'c', 'h', 0xff}))
	l = claim(cases[1].scope, cases[1].key)
	require.NoError(t, l.Complete(ctx, redisstore.Response{Code: 201,
		Body: codec.Append(nil, http.Header{"Content-Type": {"application/json"}, "Location": {pay.Location}}, pay.Body, false)}))
	l = claim(cases[2].scope, cases[2].key)
	require.NoError(t, l.Interrupt(ctx))
	_, err = store.Do(ctx, redisstore.Request{Scope: cases[3].scope, Key: cases[3].key}, func(context.Context, *redisstore.Lease) ([]byte, error) {
		return []byte(`{"charge":"ch_1"}`), nil
	})
	require.NoError(t, err)
	_, err = store.Do(ctx, redisstore.Request{Scope: cases[4].scope, Key: cases[4].key}, func(context.Context, *redisstore.Lease) ([]byte, error) {
		return nil, errors.New("card declined")
	})
	require.ErrorIs(t, err, redisstore.ErrFailed)
	l = claim(cases[5].scope, cases[5].key)
	require.NoError(t, l.Complete(ctx, redisstore.Response{Code: -3, Body: []byte("x")}))
	claim(cases[6].scope, cases[6].key)

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := store.RecordName(c.scope, c.key)
			input, err := json.Marshal(map[string]any{"prefix": prefix, "scope": Bytes(c.scope), "key": Bytes(c.key),
				"outcome": c.outcome, "dictionaries": []string{dictPath}})
			require.NoError(t, err)
			got := runReader(t, node, "live", srv.Addr(), string(input))
			require.Len(t, got, 1)
			line := got[0]
			require.Equal(t, toView(t, Bytes(name)), line["name"], "the reader names the record as the store does")
			require.Equal(t, "string", line["type"])
			v, err := rdb.Get(ctx, name).Bytes()
			require.NoError(t, err)
			require.Equal(t, recordView(t, v), line["record"])
			rec, err := ParseRecord(v)
			require.NoError(t, err)
			switch c.outcome {
			case "http":
				require.Equal(t, responseView(t, codec, rec.Outcome), line["outcome"])
			case "do":
				require.Equal(t, doView(t, rec.Code, rec.Outcome), line["outcome"])
			default:
				require.NotContains(t, line, "outcome")
			}
			tomb, err := rdb.Get(ctx, name+":t").Bytes()
			if errors.Is(err, redis.Nil) {
				require.Nil(t, line["tombstone"])
			} else {
				require.NoError(t, err)
				require.Equal(t, tombstoneView(t, tomb), line["tombstone"])
			}
		})
	}
}

// TestCIRequiresNode: CI installs node and fails the Node reader's test
// rather than skip it.
func TestCIRequiresNode(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", ".ci", "run"))
	require.NoError(t, err)
	require.Contains(t, string(b), "export "+nodeEnv+"=1")
	require.Contains(t, string(b), "apt-get install -y -qq nodejs")
}
