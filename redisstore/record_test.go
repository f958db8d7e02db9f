package redisstore

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRecordRoundTrip(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		fp := storedFingerprint(string(randBytes(rnd, rnd.IntN(40))))
		st := started{attempt: 1 + rnd.IntN(1000), label: string(randBytes(rnd, rnd.IntN(60))), createdMS: rnd.Int64N(1 << 45)}
		if i%2 == 0 {
			st.recoveryPoint = string(randBytes(rnd, 1+rnd.IntN(20)))
			st.recoveryData = randBytes(rnd, rnd.IntN(100))
		}
		tok := string(randBytes(rnd, tokenLen))
		v := string(appendStarted(nil, &fp, tok, "86390000", &st))
		got, gotTok, ok := parseStarted(v)
		require.True(t, ok)
		require.Equal(t, tok, gotTok)
		if st.recoveryPoint == "" {
			st.recoveryData = nil
		}
		require.Equal(t, st, got)
		thr, ok := threshold(v)
		require.True(t, ok)
		require.EqualValues(t, 86390000, thr)
		require.Equal(t, string(fp[:]), v[offFP:offFP+fpLen])

		body := randBytes(rnd, rnd.IntN(3000))
		code := rnd.IntN(1000)
		c := string(appendCompleted(nil, &fp, st.attempt, code, body))
		att, gotCode, gotBody, ok := parseCompleted(c)
		require.True(t, ok)
		require.Equal(t, st.attempt, att)
		require.Equal(t, code, gotCode)
		require.True(t, bytes.Equal(body, []byte(gotBody)))
		_, _, ok = parseStarted(c)
		require.False(t, ok, "a completed record is not a started one")
	}
}

func TestStoredFingerprint(t *testing.T) {
	raw := "0123456789abcdef"
	got := storedFingerprint(raw)
	require.Equal(t, raw, string(got[:]), "a 16-byte fingerprint is kept as it is")
	require.NotEqual(t, storedFingerprint("a"), storedFingerprint("b"))
	require.Equal(t, storedFingerprint(""), storedFingerprint(""))
}

func TestTombstone(t *testing.T) {
	fp := [fpLen]byte{0xff, 0xfe, 0xfd, 0xfc}
	require.Equal(t, "1125882591758597", tombstone(&fp, 201, 5)) // (0xfffefdfc << 18) + 201<<8 + 5
	require.Equal(t, "1125882591707391", tombstone(&fp, 5000, 999), "codes beyond 1023 become 0, attempts cap at 255")
}

func randBytes(rnd *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rnd.Uint32())
	}
	return b
}

// FuzzRecord checks that the record decoders never panic on any bytes, and
// that whatever they accept re-encodes to the same bytes.
func FuzzRecord(f *testing.F) {
	fp := storedFingerprint("f")
	f.Add(string(appendStarted(nil, &fp, "12345678", "100", &started{attempt: 3, recoveryPoint: "p", recoveryData: []byte("d"), label: "l", createdMS: 9})))
	f.Add(string(appendCompleted(nil, &fp, 2, 404, []byte(`{"e":1}`))))
	f.Add("S-")
	f.Add("C-0123456789abcdef1:2")
	f.Fuzz(func(t *testing.T, v string) {
		if st, tok, ok := parseStarted(v); ok {
			var fp [fpLen]byte
			copy(fp[:], v[offFP:])
			thr, ok := threshold(v)
			if !ok {
				t.Fatalf("parseStarted accepted %q but threshold did not", v)
			}
			_ = thr
			if st.recoveryPoint == "" && len(st.recoveryData) != 0 {
				t.Fatalf("recovery data without a point in %q", v)
			}
			_ = tok
		}
		if att, code, body, ok := parseCompleted(v); ok {
			var fp [fpLen]byte
			copy(fp[:], v[offFP:])
			again := string(appendCompleted(nil, &fp, att, code, []byte(body)))
			if len(again) > len(v) {
				t.Fatalf("completed record %q re-encodes longer: %q", v, again)
			}
		}
	})
}
