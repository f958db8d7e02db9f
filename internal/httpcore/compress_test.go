package httpcore

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/internal/corpus"
	"github.com/idemkey/idemkey/internal/zdict"
)

// appendV1 writes a response as the first releases did (version 1), for the
// tests that prove such records still replay.
func appendV1(dst []byte, h http.Header, body []byte, omitted bool) []byte {
	flags := byte(0)
	if omitted {
		flags = flagBodyOmitted
	}
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	dst = append(dst, responseV1, flags)
	dst = binary.AppendUvarint(dst, uint64(n))
	for k, vs := range h {
		for _, v := range vs {
			dst = binary.AppendUvarint(dst, uint64(len(k)))
			dst = append(dst, k...)
			dst = binary.AppendUvarint(dst, uint64(len(v)))
			dst = append(dst, v...)
		}
	}
	return append(dst, body...)
}

// testDicts trains two dictionaries, on payments and on orders, once.
var testDicts = sync.OnceValues(func() ([][]byte, error) {
	pay, err := zdict.Train(corpus.Payment.Bodies(100, 300), zdict.Options{ID: 40001, Size: 8 << 10})
	if err != nil {
		return nil, err
	}
	ord, err := zdict.Train(corpus.Order.Bodies(100, 300), zdict.Options{ID: 40002, Size: 8 << 10})
	return [][]byte{pay, ord}, err
})

func dicts(t testing.TB) [][]byte {
	t.Helper()
	d, err := testDicts()
	require.NoError(t, err)
	return d
}

// codecs returns the codecs the round-trip tests run through.
func codecs(t testing.TB) map[string]*ResponseCodec {
	d := dicts(t)
	zstdOnly, err := NewResponseCodec(Compression{On: true})
	require.NoError(t, err)
	withDict, err := NewResponseCodec(Compression{Dictionaries: d})
	require.NoError(t, err)
	otherDict, err := NewResponseCodec(Compression{Dictionaries: [][]byte{d[1], d[0]}})
	require.NoError(t, err)
	return map[string]*ResponseCodec{"raw": nil, "zstd": zstdOnly, "zstd+dict": withDict, "zstd+other dict": otherDict}
}

func gzipped(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// roundTripBodies are bodies of every shape: the corpus, random bytes,
// binary with NULs, gzip, repetitive, empty.
func roundTripBodies(t testing.TB) map[string][]byte {
	r := rand.New(rand.NewPCG(7, 7))
	out := map[string][]byte{"empty": nil, "one byte": {0}, "repetitive": bytes.Repeat([]byte("ab"), 5000),
		"NULs": make([]byte, 300), "binary": {0xff, 0x00, 0x28, 0xb5, 0x2f, 0xfd, 0x01}}
	for _, k := range corpus.Kinds() {
		for i, b := range k.Bodies(200, 5) {
			out[fmt.Sprintf("%s #%d", k.Name, i)] = b
			out[fmt.Sprintf("%s #%d gzip", k.Name, i)] = gzipped(t, b)
		}
	}
	for _, n := range []int{1, 31, 32, 33, 100, 1000, 70000, 300000} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		out[fmt.Sprintf("random %d", n)] = b
		text := make([]byte, n)
		for i := range text {
			text[i] = "abcdefgh {}\":,"[r.IntN(14)]
		}
		out[fmt.Sprintf("text %d", n)] = text
	}
	return out
}

var roundTripHeaders = map[string]http.Header{
	"none":  {},
	"bench": {"Content-Type": {"application/json; charset=utf-8"}, "Location": {"/v1/payments/pay_123"}},
	"mixed": {"Content-Type": {"application/x-custom"}, "X-Multi": {"1", "2", ""}, "Etag": {`"v1"`},
		"Cache-Control": {"no-store"}, "non-canonical": {"kept as is"}, "": {"empty name"}, "Vary": {"Origin", "Accept-Encoding"}},
}

func TestResponseRoundTrip(t *testing.T) {
	bodies := roundTripBodies(t)
	for cname, c := range codecs(t) {
		for hname, h := range roundTripHeaders {
			for bname, body := range bodies {
				for _, omitted := range []bool{false, true} {
					stored := c.Append([]byte("prefix"), h, body, omitted)
					require.Equal(t, "prefix", string(stored[:6]))
					got, err := c.Decode(201, stored[6:])
					require.NoError(t, err, "%s / %s / %s", cname, hname, bname)
					require.True(t, bytes.Equal(body, got.Body), "%s / %s / %s: body differs", cname, hname, bname)
					require.Equal(t, h, got.Header, "%s / %s / %s", cname, hname, bname)
					require.Equal(t, omitted, got.BodyOmitted)
					require.Equal(t, 201, got.Status)
					on, _ := c.Compresses()
					if !on {
						require.False(t, got.Compressed)
					}
					if got.Compressed { // never stored compressed unless smaller
						require.Less(t, len(stored)-6, len(appendResponse(nil, h, body, omitted)))
					}
					// A replay decodes the same headers and body.
					hdr := http.Header{"X-Outer": {"kept"}, "Content-Type": {"replaced"}}
					rbody, done, err := c.replayInto(hdr, stored[6:])
					require.NoError(t, err)
					require.True(t, done)
					require.True(t, bytes.Equal(body, rbody))
					want := http.Header{"X-Outer": {"kept"}, "Content-Type": {"replaced"}}
					for k, v := range h {
						if len(v) > 0 {
							want[k] = v
						}
					}
					want["Idempotent-Replayed"] = []string{"true"}
					require.Equal(t, want, hdr, "%s / %s / %s", cname, hname, bname)
				}
			}
		}
	}
}

func TestCompressionOnlyWhenSmaller(t *testing.T) {
	c := codecs(t)["zstd+dict"]
	random := make([]byte, 2000)
	for i := range random {
		random[i] = byte(i*7919 + i>>3)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	got, err := c.Decode(200, c.Append(nil, nil, random, false))
	require.NoError(t, err)
	require.False(t, got.Compressed, "random bytes do not shrink: stored raw")

	body := corpus.Payment.Bodies(300, 1)[0]
	stored := c.Append(nil, nil, body, false)
	got, err = c.Decode(200, stored)
	require.NoError(t, err)
	require.True(t, got.Compressed)
	require.Less(t, len(stored), len(body)/2, "a payment compresses more than 2x with its dictionary")
	require.Equal(t, body, got.Body)

	short := []byte(`{"ok":true}`)
	require.Equal(t, appendResponse(nil, nil, short, false), c.Append(nil, nil, short, false), "too short to try")
}

// TestVersion1Decodes: responses written by the previous release (version
// 1) replay through every codec, compressing or not.
func TestVersion1Decodes(t *testing.T) {
	h := http.Header{"Location": {"/a"}, "X-Multi": {"1", "2"}, "Empty": {""}, "Content-Type": {"application/json"}}
	body := []byte("\x00binary\xff")
	for name, c := range codecs(t) {
		for _, omitted := range []bool{false, true} {
			got, err := c.Decode(201, appendV1(nil, h, body, omitted))
			require.NoError(t, err, name)
			require.Equal(t, &StoredResponse{Status: 201, Header: h, Body: body, BodyOmitted: omitted}, got, name)
		}
	}
}

func TestUnknownDictionary(t *testing.T) {
	d := dicts(t)
	c := codecs(t)
	body := corpus.Payment.Bodies(301, 1)[0]
	stored := c["zstd+dict"].Append(nil, roundTripHeaders["bench"], body, false)

	for _, name := range []string{"raw", "zstd"} {
		_, err := c[name].Decode(201, stored)
		require.ErrorIs(t, err, ErrUnknownDictionary, name)
		require.ErrorIs(t, err, ErrCorruptResponse, name)
		require.ErrorContains(t, err, "ID 40001")
	}
	_, err := DecodeResponse(201, stored)
	require.ErrorIs(t, err, ErrUnknownDictionary)

	// The old dictionary, kept after the new one, still decodes.
	newer, err := zdict.Train(corpus.Payment.Bodies(101, 300), zdict.Options{ID: 40003, Size: 4 << 10})
	require.NoError(t, err)
	rotated, err := NewResponseCodec(Compression{Dictionaries: [][]byte{newer, d[0]}})
	require.NoError(t, err)
	got, err := rotated.Decode(201, stored)
	require.NoError(t, err)
	require.Equal(t, body, got.Body)
	_, id := rotated.Compresses()
	require.EqualValues(t, 40003, id)
}

func TestNewResponseCodecRefusesBadDictionaries(t *testing.T) {
	d := dicts(t)
	zeroID := bytes.Clone(d[0])
	binary.LittleEndian.PutUint32(zeroID[4:], 0)
	for name, ds := range map[string][][]byte{
		"not a dictionary": {[]byte("just some bytes here")},
		"empty":            {nil},
		"ID 0":             {zeroID},
		"duplicate ID":     {d[0], d[0]},
		"truncated":        {d[0][:20]},
	} {
		_, err := NewResponseCodec(Compression{Dictionaries: ds})
		require.Error(t, err, name)
	}
	c, err := NewResponseCodec(Compression{})
	require.NoError(t, err)
	require.Nil(t, c, "no compression: the nil codec")
	require.Panics(t, func() { Config{Dictionaries: [][]byte{[]byte("nope")}}.withDefaults() })
}

func TestCorruptResponses(t *testing.T) {
	c := codecs(t)["zstd+dict"]
	good := c.Append(nil, roundTripHeaders["bench"], corpus.Payment.Bodies(302, 1)[0], false)
	require.NotZero(t, good[0]&flagCompressed)
	for name, bad := range map[string][]byte{
		"nil": nil, "empty": {}, "version 0": {0}, "version 3": {0x30, 0}, "unknown flag": {0x24, 0},
		"v1 short": {1}, "v1 count past end": {1, 0, 5}, "v1 name past end": {1, 0, 1, 10, 'a'}, "v1 bad varint": {1, 0, 0xff},
		"v2 no count": {0x20}, "v2 count past end": {0x20, 5}, "v2 name index past table": {0x20, 1, 0xfe, 0x7f, 0},
		"v2 literal past end": {0x20, 1, 21, 'a'}, "v2 value missing": {0x20, 1, 0},
		"compressed garbage": {0x22, 1, 2, 3, 4, 5}, "compressed truncated": good[:len(good)-5],
		"compressed trailing bytes": append(bytes.Clone(good), 0, 0, 0, 0, 0, 0, 0, 0),
		"compressed, flag dropped":  append([]byte{good[0] &^ flagCompressed}, good[1:]...),
	} {
		_, err := c.Decode(200, bad)
		require.ErrorIs(t, err, ErrCorruptResponse, name)
		// A replay either leaves it to Decode, or fails the same, with the
		// headers untouched.
		hdr := http.Header{"X-Outer": {"kept"}}
		if _, done, err := c.replayInto(hdr, bad); done {
			require.ErrorIs(t, err, ErrCorruptResponse, name)
		} else {
			require.NoError(t, err, name)
		}
		require.Equal(t, http.Header{"X-Outer": {"kept"}}, hdr, name)
	}
	// Headers out of the encoder's order (not written by it) are left to
	// Decode, which takes any order.
	unsorted := []byte{0x20, 2, 2 * 1, 3, 'b', 2 * 0, 3, 'a'} // Location: b, Content-Type: a
	hdr := http.Header{}
	_, done, err := c.replayInto(hdr, unsorted)
	require.NoError(t, err)
	require.False(t, done)
	require.Empty(t, hdr)
	got, err := c.Decode(200, unsorted)
	require.NoError(t, err)
	require.Equal(t, http.Header{"Location": {"b"}, "Content-Type": {"a"}}, got.Header)
}

// TestHeaderTablesAppendOnly holds the tables to what earlier releases
// wrote: stored responses name entries by index.
func TestHeaderTablesAppendOnly(t *testing.T) {
	frozenNames := []string{"Content-Type", "Location", "Content-Encoding", "Cache-Control", "Etag", "Vary", "Link"}
	frozenValues := []string{"application/json", "application/json; charset=utf-8", "text/plain; charset=utf-8",
		"application/problem+json", "application/octet-stream"}
	require.Equal(t, frozenNames, headerNameList[:len(frozenNames)])
	require.Equal(t, frozenValues, headerValueList[:len(frozenValues)])
	require.Len(t, headerNames, len(headerNameList), "no duplicates")
	require.Len(t, headerValues, len(headerValueList), "no duplicates")
	require.Less(t, len(headerNameList), 64, "every name index fits one byte")
	require.Less(t, len(headerValueList), 64, "every value index fits one byte")
	for _, k := range headerNameList {
		require.Equal(t, http.CanonicalHeaderKey(k), k)
	}
}

// TestHeaderBytes shows the lever of version 2 for the bench app's
// headers: what they cost in each version.
func TestHeaderBytes(t *testing.T) {
	h := http.Header{"Content-Type": {"application/json; charset=utf-8"}, "Location": {"/v1/payment_intents/pi_3MtwBwLkdIwHu7ix28a3tqPa"}}
	v1 := len(appendV1(nil, h, nil, false))
	v2 := len(appendResponse(nil, h, nil, false))
	t.Logf("stored headers (Content-Type: Gin JSON, Location of %d B): version 1 %d B, version 2 %d B", len(h.Get("Location")), v1, v2)
	require.Equal(t, 1+1+2+2+len(h.Get("Location")), v2)
	require.Less(t, v2, v1-40)
}

// TestFrameOverhead holds the stored zstd frame to its smallest form: no
// magic number, one segment (content size, no window), a 2-byte dictionary
// ID for IDs below 65536, no checksum.
func TestFrameOverhead(t *testing.T) {
	c := codecs(t)["zstd+dict"]
	body := corpus.Payment.Bodies(303, 1)[0]
	stored := c.Append(nil, nil, body, false)
	require.Equal(t, byte(responseV2|flagCompressed), stored[0])
	require.NotEqual(t, zstdMagic[:], stored[1:5], "the magic number is not stored")
	var h zstd.Header
	require.NoError(t, h.Decode(append(zstdMagic[:], stored[1:]...)))
	require.True(t, h.SingleSegment)
	require.False(t, h.HasCheckSum)
	require.EqualValues(t, 40001, h.DictionaryID)
	require.Equal(t, 4+1+2+2, h.HeaderSize, "magic, descriptor, 2-byte dictionary ID, 2-byte content size")
	t.Logf("payment body %d B: stored %d B, of which 1 B version and flags and %d B frame header (the 4-byte magic number not stored)",
		len(body), len(stored), h.HeaderSize-4)
}

// TestDecodeBoundedByMaxResponseBytes: a stored response may decompress to
// no more than MaxResponseBytes plus HeaderAllowance (a decompression
// bomb: a few hundred bytes of record inflated to megabytes).
func TestDecodeBoundedByMaxResponseBytes(t *testing.T) {
	codec := func(compress bool, max int) *ResponseCodec {
		c, err := NewResponseCodec(Compression{On: compress, MaxResponseBytes: max})
		require.NoError(t, err)
		return c
	}
	h := http.Header{"Content-Type": {"application/octet-stream"}}
	body := make([]byte, 4<<20)
	stored := codec(true, 8<<20).Append(nil, h, body, false)
	require.Less(t, len(stored), 4<<10, "compressed")

	for _, c := range []*ResponseCodec{codec(true, 8<<20), codec(false, 8<<20)} {
		r, err := c.Decode(http.StatusOK, stored)
		require.NoError(t, err)
		require.Equal(t, body, r.Body)
	}
	// Without MaxResponseBytes (a tool reading records): the middleware's
	// default, see TestDecoderWithoutMaxResponseBytesIsBounded.
	for _, c := range []*ResponseCodec{codec(true, 1<<20), codec(false, 1<<20), codec(true, 4<<20-HeaderAllowance), codec(false, 0), nil} {
		_, err := c.Decode(http.StatusOK, stored)
		require.ErrorIs(t, err, ErrCorruptResponse)
	}

	// Headers beyond the allowance: stored uncompressed, so they replay.
	big := http.Header{"X-Big": {string(bytes.Repeat([]byte("a"), HeaderAllowance+1))}}
	c := codec(true, 1024)
	stored = c.Append(nil, big, make([]byte, 1024), false)
	r, err := c.Decode(http.StatusOK, stored)
	require.NoError(t, err)
	require.False(t, r.Compressed)
	require.Equal(t, big, r.Header)
}

// TestDecoderWithoutMaxResponseBytesIsBounded: a codec built without
// MaxResponseBytes (the tools', inspect's) decodes up to the middleware's
// default (DefaultMaxResponseBytes plus HeaderAllowance), not 1 GiB: a
// record of a few KiB that decompresses to 64 MiB is refused as corrupt
// without allocating it. It used to be decoded whole (up to 1 GiB).
func TestDecoderWithoutMaxResponseBytesIsBounded(t *testing.T) {
	big, err := NewResponseCodec(Compression{On: true, MaxResponseBytes: 128 << 20})
	require.NoError(t, err)
	bomb := big.Append(nil, http.Header{}, make([]byte, 64<<20), false)
	require.Less(t, len(bomb), 16<<10, "a small record")
	within := big.Append(nil, http.Header{}, make([]byte, DefaultMaxResponseBytes), false)

	tool, err := NewResponseCodec(Compression{})
	require.NoError(t, err)
	for _, c := range []*ResponseCodec{tool, nil} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := c.Decode(http.StatusOK, bomb)
		runtime.ReadMemStats(&after)
		require.ErrorIs(t, err, ErrCorruptResponse)
		require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(8<<20), "the refused body was allocated")
		r, err := c.Decode(http.StatusOK, within)
		require.NoError(t, err, "the default's worth decodes")
		require.Len(t, r.Body, DefaultMaxResponseBytes)
	}
	r, err := big.Decode(http.StatusOK, bomb)
	require.NoError(t, err, "with its MaxResponseBytes, a tool reads it")
	require.Len(t, r.Body, 64<<20)
}
