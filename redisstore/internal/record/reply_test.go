package record

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDecodeClaim(t *testing.T) {
	fp := Fingerprint("f")
	prev := string(AppendStarted(nil, &fp, "tok-0001", "5000", &Started{Attempt: 2, RecoveryPoint: "charged", RecoveryData: []byte("ch_1"), Label: "POST /x", CreatedMS: 7}))
	done := string(AppendCompleted(nil, &fp, 1, 201, []byte("body")))
	empty := string(AppendCompleted(nil, &fp, 3, 204, nil))
	tests := []struct {
		name  string
		reply any
		want  *ClaimReply // nil: refused
	}{
		{"claimed", []any{int64(1), int64(1), ""}, &ClaimReply{Status: 1, Attempt: 1}},
		{"took over", []any{int64(1), int64(3), prev}, &ClaimReply{Status: 1, Attempt: 3, Record: prev}},
		{"replay", []any{int64(2), done}, &ClaimReply{Status: 2, Attempt: 1, Code: 201, Body: []byte("body")}},
		{"replay with its ttl", []any{int64(2), done, int64(90)}, &ClaimReply{Status: 2, Attempt: 1, Code: 201, Body: []byte("body"), TTL: 90 * time.Millisecond}},
		{"replay of empty body", []any{int64(2), empty}, &ClaimReply{Status: 2, Attempt: 3, Code: 204, Body: []byte{}}},
		{"legacy replay", []any{int64(7), int64(200), "old"}, &ClaimReply{Status: 7, Code: 200, Body: []byte("old")}},
		{"in progress", []any{int64(3), int64(1500)}, &ClaimReply{Status: 3, LeaseLeft: 1500 * time.Millisecond}},
		{"in progress, negative", []any{int64(3), int64(-1)}, &ClaimReply{Status: 3}},
		{"mismatch", []any{int64(4)}, &ClaimReply{Status: 4}},
		{"previous format", []any{int64(5)}, &ClaimReply{Status: 5}},
		{"legacy record gone", []any{int64(1), int64(0), ""}, &ClaimReply{Status: 5}},
		{"expired", []any{int64(6), int64(201), int64(2)}, &ClaimReply{Status: 6, Code: 201, Attempt: 2}},
		{"unknown record", []any{int64(0)}, nil},
		{"not a list", "OK", nil},
		{"empty list", []any{}, nil},
		{"unknown code", []any{int64(9)}, nil},
		{"code as string", []any{"1", int64(1), ""}, nil},
		{"short owned", []any{int64(1), int64(1)}, nil},
		{"negative attempt", []any{int64(1), int64(-1), ""}, nil},
		{"owned with garbage record", []any{int64(1), int64(2), "garbage"}, nil},
		{"replay of a started record", []any{int64(2), prev}, nil},
		{"replay without record", []any{int64(2)}, nil},
		{"replay with a ttl of another type", []any{int64(2), done, "90"}, nil},
		{"long mismatch", []any{int64(4), "x"}, nil},
		{"nil", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := DecodeClaim(tt.reply)
			if tt.want == nil {
				require.False(t, ok)
				require.Zero(t, got)
				return
			}
			require.True(t, ok)
			require.Equal(t, *tt.want, got)
		})
	}
}

func TestDecodeOwned(t *testing.T) {
	for _, tt := range []struct {
		reply     any
		owned, ok bool
	}{{int64(1), true, true}, {int64(0), false, true}, {int64(2), false, false}, {"1", false, false}, {nil, false, false}} {
		owned, ok := DecodeOwned(tt.reply)
		require.Equal(t, tt.owned, owned, "%#v", tt.reply)
		require.Equal(t, tt.ok, ok, "%#v", tt.reply)
	}
}

func TestDecodeLookup(t *testing.T) {
	fp := Fingerprint("f")
	st := Started{Attempt: 2, RecoveryPoint: "p", RecoveryData: []byte("d"), Label: "l", CreatedMS: 7}
	started := string(AppendStarted(nil, &fp, "tok-0001", "5000", &st))
	released := started[:1] + string(FlagReleased) + started[2:]
	done := string(AppendCompleted(nil, &fp, 3, 201, []byte("body")))
	tests := []struct {
		name  string
		reply any
		want  *Found // nil: refused
	}{
		{"none", []any{int64(-2), "none", ""}, &Found{Type: "none"}},
		{"previous format", []any{int64(9000), "hash", ""}, &Found{Type: "hash", TTL: 9 * time.Second}},
		{"started, lease held", []any{int64(6500), "string", started},
			&Found{Type: "string", TTL: 6500 * time.Millisecond, Fingerprint: string(fp[:]), Started: st, LeaseTTL: 1500 * time.Millisecond}},
		{"started, lease ran out", []any{int64(4000), "string", started},
			&Found{Type: "string", TTL: 4 * time.Second, Fingerprint: string(fp[:]), Started: st}},
		{"started, released", []any{int64(6500), "string", released},
			&Found{Type: "string", TTL: 6500 * time.Millisecond, Fingerprint: string(fp[:]), Released: true, Started: st}},
		{"completed", []any{int64(100), "string", done},
			&Found{Type: "string", TTL: 100 * time.Millisecond, Fingerprint: string(fp[:]), Completed: true, Attempt: 3, Code: 201, Body: "body"}},
		{"not a record", []any{int64(100), "string", "x"}, nil},
		{"a list", []any{int64(100), "list", ""}, nil},
		{"short", []any{int64(100), "string"}, nil},
		{"ttl as string", []any{"100", "string", done}, nil},
		{"nil", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := DecodeLookup(tt.reply)
			if tt.want == nil {
				require.False(t, ok)
				require.Zero(t, got)
				return
			}
			require.True(t, ok)
			require.Equal(t, *tt.want, got)
		})
	}
}

func TestKeys(t *testing.T) {
	k := NewKeys("idem:", "acct", "k1")
	require.Regexp(t, `^idem:\{[A-Za-z0-9_-]{22}\}$`, k.Record())
	require.Equal(t, []string{k.Record()}, k.One)
	require.Equal(t, k.Record()+":lease", k.LegacyLease())
	require.Equal(t, k.Record()+":w", k.Channel())
	require.Equal(t, k.Record()+":t", k.Tombstone())
	require.NotEqual(t, k.Record(), NewKeys("idem:", "acc", "tk1").Record(), "the scope's length is hashed too")
	long := NewKeys(string(make([]byte, 200)), "", "k")
	require.Len(t, long.Record(), 200+24, "a prefix past the stack buffer")
}

// FuzzDecodeClaim feeds the decoder replies of every shape a Redis reply can
// take: it must decode them or refuse them, never panic, and never return
// half a reply with a refusal.
func FuzzDecodeClaim(f *testing.F) {
	fp := Fingerprint("f")
	f.Add(int64(1), int64(1), "", uint8(3))
	f.Add(int64(1), int64(2), string(AppendStarted(nil, &fp, "12345678", "9", &Started{Attempt: 2, RecoveryPoint: "p"})), uint8(3))
	f.Add(int64(2), int64(201), string(AppendCompleted(nil, &fp, 1, 201, []byte("b"))), uint8(2))
	f.Add(int64(3), int64(900), "", uint8(2))
	f.Add(int64(4), int64(0), "", uint8(1))
	f.Add(int64(6), int64(200), "", uint8(3))
	f.Add(int64(7), int64(-5), "x", uint8(0))
	f.Fuzz(func(t *testing.T, code, n int64, s string, shape uint8) {
		elems := []any{code, n, s, nil, int64(0), []any{s}}
		// shape picks the length and, in its high bits, swaps element types.
		reply := elems[:shape%4]
		if shape&0x80 != 0 && len(reply) > 1 {
			reply = append([]any{}, reply...)
			reply[1] = s
		}
		if shape&0x40 != 0 && len(reply) > 2 {
			reply = append([]any{}, reply...)
			reply[2] = n
		}
		c, ok := DecodeClaim(reply)
		switch {
		case !ok && (c.Status != 0 || c.Body != nil || c.Record != ""):
			t.Fatalf("DecodeClaim(%#v) refused it but returned %+v", reply, c)
		case ok && (c.Status < Owned || c.Status > LegacyReplay):
			t.Fatalf("DecodeClaim(%#v) = %+v: unknown status", reply, c)
		}
		l, ok := DecodeLookup(reply)
		if !ok && l.Type != "" {
			t.Fatalf("DecodeLookup(%#v) refused it but returned %+v", reply, l)
		}
	})
}

func TestDecodeForget(t *testing.T) {
	fp := Fingerprint("f")
	started := string(AppendStarted(nil, &fp, "tok-0001", "5000", &Started{Attempt: 2, Label: "POST /x", CreatedMS: 7}))
	done := string(AppendCompleted(nil, &fp, 1, 201, []byte("body")))
	tests := []struct {
		name  string
		reply any
		want  *ForgetReply // nil: refused
	}{
		{"nothing", []any{int64(0)}, &ForgetReply{}},
		{"a started record", []any{int64(1), started, int64(0)}, &ForgetReply{Status: 1, Record: started}},
		{"a live lease, fenced", []any{int64(1), started, int64(900)}, &ForgetReply{Status: 1, Record: started, LeaseLeft: 900 * time.Millisecond}},
		{"a completed record, cut", []any{int64(1), done[:OffCompletedTail+6], int64(0)}, &ForgetReply{Status: 1, Record: done[:OffCompletedTail+6]}},
		{"only a tombstone", []any{int64(1), "", int64(0)}, &ForgetReply{Status: 1}},
		{"another type", []any{int64(2), "list"}, &ForgetReply{Status: 2, Type: "list"}},
		{"refused", []any{int64(3), int64(1500)}, &ForgetReply{Status: 3, LeaseLeft: 1500 * time.Millisecond}},
		{"forgotten garbage", []any{int64(1), "garbage", int64(0)}, nil},
		{"forgotten without record", []any{int64(1)}, nil},
		{"forgotten without lease", []any{int64(1), started}, nil},
		{"nothing, long", []any{int64(0), "x"}, nil},
		{"refused as string", []any{int64(3), "1500"}, nil},
		{"type as number", []any{int64(2), int64(1)}, nil},
		{"unknown code", []any{int64(9), ""}, nil},
		{"not a list", int64(1), nil},
		{"empty", []any{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := DecodeForget(tt.reply)
			if tt.want == nil {
				require.False(t, ok)
				require.Zero(t, got)
				return
			}
			require.True(t, ok)
			require.Equal(t, *tt.want, got)
		})
	}
}
