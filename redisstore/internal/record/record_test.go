package record

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRecordRoundTrip(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		fp := Fingerprint(string(randBytes(rnd, rnd.IntN(40))))
		st := Started{Attempt: 1 + rnd.IntN(1000), Label: string(randBytes(rnd, rnd.IntN(60))), CreatedMS: rnd.Int64N(1 << 45)}
		if i%2 == 0 {
			st.RecoveryPoint = string(randBytes(rnd, 1+rnd.IntN(20)))
			st.RecoveryData = randBytes(rnd, rnd.IntN(100))
		}
		tok := string(randBytes(rnd, TokenLen))
		v := string(AppendStarted(nil, &fp, tok, "86390000", &st))
		got, gotTok, ok := ParseStarted(v)
		require.True(t, ok)
		require.Equal(t, tok, gotTok)
		if st.RecoveryPoint == "" {
			st.RecoveryData = nil
		}
		require.Equal(t, st, got)
		thr, ok := Threshold(v)
		require.True(t, ok)
		require.EqualValues(t, 86390000, thr)
		require.Equal(t, string(fp[:]), v[OffFP:OffFP+FPLen])

		body := randBytes(rnd, rnd.IntN(3000))
		code := rnd.IntN(1000)
		c := string(AppendCompleted(nil, &fp, st.Attempt, code, body))
		att, gotCode, gotBody, ok := ParseCompleted(c)
		require.True(t, ok)
		require.Equal(t, st.Attempt, att)
		require.Equal(t, code, gotCode)
		require.True(t, bytes.Equal(body, []byte(gotBody)))
		_, _, ok = ParseStarted(c)
		require.False(t, ok, "a completed record is not a started one")
	}
}

func TestStoredFingerprint(t *testing.T) {
	raw := "0123456789abcdef"
	got := Fingerprint(raw)
	require.Equal(t, raw, string(got[:]), "a 16-byte fingerprint is kept as it is")
	require.NotEqual(t, Fingerprint("a"), Fingerprint("b"))
	require.Equal(t, Fingerprint(""), Fingerprint(""))
}

func TestTombstone(t *testing.T) {
	fp := [FPLen]byte{0xff, 0xfe, 0xfd, 0xfc}
	require.Equal(t, "1125882591758597", Tombstone(&fp, 201, 5)) // (0xfffefdfc << 18) + 201<<8 + 5
	require.Equal(t, "1125882591707391", Tombstone(&fp, 5000, 999), "codes beyond 1023 become 0, attempts cap at 255")
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
	fp := Fingerprint("f")
	f.Add(string(AppendStarted(nil, &fp, "12345678", "100", &Started{Attempt: 3, RecoveryPoint: "p", RecoveryData: []byte("d"), Label: "l", CreatedMS: 9})))
	f.Add(string(AppendCompleted(nil, &fp, 2, 404, []byte(`{"e":1}`))))
	f.Add("S-")
	f.Add("C-0123456789abcdef1:2")
	f.Fuzz(func(t *testing.T, v string) {
		if st, tok, ok := ParseStarted(v); ok {
			var fp [FPLen]byte
			copy(fp[:], v[OffFP:])
			thr, ok := Threshold(v)
			if !ok {
				t.Fatalf("ParseStarted accepted %q but threshold did not", v)
			}
			_ = thr
			if st.RecoveryPoint == "" && len(st.RecoveryData) != 0 {
				t.Fatalf("recovery data without a point in %q", v)
			}
			_ = tok
		}
		if att, code, body, ok := ParseCompleted(v); ok {
			var fp [FPLen]byte
			copy(fp[:], v[OffFP:])
			again := string(AppendCompleted(nil, &fp, att, code, []byte(body)))
			if len(again) > len(v) {
				t.Fatalf("completed record %q re-encodes longer: %q", v, again)
			}
		}
	})
}

// TestLayoutIsLuas holds the offsets here to the table in package lua's doc
// (1-based there), which the scripts follow.
func TestLayoutIsLuas(t *testing.T) {
	src, err := os.ReadFile("../../../lua/lua.go")
	require.NoError(t, err)
	rows := map[string]string{} // field -> position
	for _, m := range regexp.MustCompile(`(?m)^//\t(\d+(?:-\d*)?)\s+(\(?\w+\)?)`).FindAllStringSubmatch(string(src), -1) {
		rows[m[2]] = m[1]
	}
	pos := func(off, n int) string { // a 0-based range as the table writes it
		if n == 0 {
			return strconv.Itoa(off+1) + "-"
		}
		if n == 1 {
			return strconv.Itoa(off + 1)
		}
		return strconv.Itoa(off+1) + "-" + strconv.Itoa(off+n)
	}
	require.Equal(t, map[string]string{
		"kind":        pos(0, 1),
		"flags":       pos(1, 1),
		"fp":          pos(OffFP, FPLen),
		"token":       pos(OffToken, TokenLen),
		"(started)":   pos(OffStartedTail, 0),
		"(completed)": pos(OffCompletedTail, 0),
	}, rows)
	for _, c := range []struct {
		field string
		b     byte
	}{{"'S'", KindStarted}, {"'C'", KindCompleted}, {"'-'", FlagNone}, {"'r'", FlagReleased}} {
		require.Contains(t, string(src), c.field, "%q", c.b)
		require.Equal(t, c.field, "'"+string(c.b)+"'")
	}
}

func TestNameKind(t *testing.T) {
	k := NewKeys("idem:", "acct", "k1")
	for _, tt := range []struct {
		name string
		kind int
	}{
		{k.Record(), NameRecord},
		{k.Tombstone(), NameTombstone},
		{k.LegacyLease(), NameLegacyLease},
		{k.Channel(), NameOther},
		{"idem:" + k.Record()[len("idem:"):len(k.Record())-2] + "}", NameOther}, // a short tag
		{"idem:{" + strings.Repeat("*", 22) + "}", NameOther},
		{"idem:" + strings.Repeat("a", 24), NameOther},
		{"other:" + k.Record()[len("idem:"):], NameOther},
		{"idem:", NameOther},
		{"", NameOther},
		{k.Record() + "x", NameOther},
	} {
		kind, keys := NameKind("idem:", tt.name)
		require.Equal(t, tt.kind, kind, "%q", tt.name)
		if kind != NameOther {
			require.Equal(t, k.Record(), keys.Record())
			require.Equal(t, k.Tombstone(), keys.Tombstone())
			require.Equal(t, k.LegacyLease(), keys.LegacyLease())
			require.Equal(t, k.One, keys.One)
		}
	}
}

func TestParseName(t *testing.T) {
	k := NewKeys("idem:", "scope", "key")
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{k.Record(), true},
		{k.Tombstone(), false},
		{k.LegacyLease(), false},
		{"idem:not-a-record", false},
		{"other:" + k.Record()[len("idem:"):], false},
	} {
		got, why := ParseName("idem:", tc.name)
		if tc.ok != (why == "") {
			t.Errorf("ParseName(%q): why %q, want ok=%v", tc.name, why, tc.ok)
		}
		if tc.ok && got.Record() != tc.name {
			t.Errorf("ParseName(%q) = %q", tc.name, got.Record())
		}
	}
}

// TestCompletedCodeAnyInt: every code a caller can give Complete (an int)
// is written in a form the decoders read back, negative ones and the
// extremes included; a record that the store writes and then refuses to
// replay would fail every retry until it expired.
func TestCompletedCodeAnyInt(t *testing.T) {
	fp := Fingerprint("f")
	for _, code := range []int{0, 1, 201, -1, -404, math.MaxInt64, math.MinInt64} {
		v := string(AppendCompleted(nil, &fp, 2, code, []byte("out")))
		att, got, body, ok := ParseCompleted(v)
		require.True(t, ok, "code %d: %q", code, v)
		require.Equal(t, 2, att)
		require.Equal(t, code, got)
		require.Equal(t, "out", body)
	}
	for _, bad := range []string{"-", "--1", "-a", "+1", "1-", "-9223372036854775809", "9223372036854775808"} {
		_, _, _, ok := ParseCompleted("C-" + string(fp[:]) + "1:" + bad + ":x")
		require.False(t, ok, "code %q", bad)
	}
}

// TestStartedCreatedBeforeEpoch: a claiming process whose clock reads
// before 1970 writes created 0 (not known), which the decoders read, not
// a negative number they would refuse.
func TestStartedCreatedBeforeEpoch(t *testing.T) {
	fp := Fingerprint("f")
	v := string(AppendStarted(nil, &fp, "12345678", "100", &Started{Attempt: 1, CreatedMS: -5}))
	got, _, ok := ParseStarted(v)
	require.True(t, ok, "%q", v)
	require.Zero(t, got.CreatedMS)
}
