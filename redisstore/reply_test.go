package redisstore

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDecodeClaim(t *testing.T) {
	fp := storedFingerprint("f")
	prev := string(appendStarted(nil, &fp, "tok-0001", "5000", &started{attempt: 2, recoveryPoint: "charged", recoveryData: []byte("ch_1"), label: "POST /x", createdMS: 7}))
	done := string(appendCompleted(nil, &fp, 1, 201, []byte("body")))
	empty := string(appendCompleted(nil, &fp, 3, 204, nil))
	tests := []struct {
		name    string
		reply   any
		want    *claimReply
		wantErr error
	}{
		{"claimed", []any{int64(1), int64(1), ""}, &claimReply{code: 1, attempt: 1}, nil},
		{"took over", []any{int64(1), int64(3), prev}, &claimReply{code: 1, attempt: 3, record: prev}, nil},
		{"replay", []any{int64(2), done}, &claimReply{code: 2, attempt: 1, status: 201, body: []byte("body")}, nil},
		{"replay of empty body", []any{int64(2), empty}, &claimReply{code: 2, attempt: 3, status: 204, body: []byte{}}, nil},
		{"legacy replay", []any{int64(7), int64(200), "old"}, &claimReply{code: 7, status: 200, body: []byte("old")}, nil},
		{"in progress", []any{int64(3), int64(1500)}, &claimReply{code: 3, leaseLeft: 1500 * time.Millisecond}, nil},
		{"in progress, negative", []any{int64(3), int64(-1)}, &claimReply{code: 3}, nil},
		{"mismatch", []any{int64(4)}, &claimReply{code: 4}, nil},
		{"previous format", []any{int64(5)}, &claimReply{code: 5}, nil},
		{"legacy record gone", []any{int64(1), int64(0), ""}, &claimReply{code: 5}, nil},
		{"expired", []any{int64(6), int64(201), int64(2)}, &claimReply{code: 6, status: 201, attempt: 2}, nil},
		{"unknown record", []any{int64(0)}, nil, ErrUnexpectedReply},
		{"not a list", "OK", nil, ErrUnexpectedReply},
		{"empty list", []any{}, nil, ErrUnexpectedReply},
		{"unknown code", []any{int64(9)}, nil, ErrUnexpectedReply},
		{"code as string", []any{"1", int64(1), ""}, nil, ErrUnexpectedReply},
		{"short owned", []any{int64(1), int64(1)}, nil, ErrUnexpectedReply},
		{"negative attempt", []any{int64(1), int64(-1), ""}, nil, ErrUnexpectedReply},
		{"owned with garbage record", []any{int64(1), int64(2), "garbage"}, nil, ErrUnexpectedReply},
		{"replay of a started record", []any{int64(2), prev}, nil, ErrUnexpectedReply},
		{"replay without record", []any{int64(2)}, nil, ErrUnexpectedReply},
		{"long mismatch", []any{int64(4), "x"}, nil, ErrUnexpectedReply},
		{"nil", nil, nil, ErrUnexpectedReply},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeClaim(tt.reply)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				require.Nil(t, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// FuzzDecodeClaim feeds the decoder replies of every shape a Redis reply can
// take: it must return a reply or an error, never panic, and never both.
func FuzzDecodeClaim(f *testing.F) {
	fp := storedFingerprint("f")
	f.Add(int64(1), int64(1), "", uint8(3))
	f.Add(int64(1), int64(2), string(appendStarted(nil, &fp, "12345678", "9", &started{attempt: 2, recoveryPoint: "p"})), uint8(3))
	f.Add(int64(2), int64(201), string(appendCompleted(nil, &fp, 1, 201, []byte("b"))), uint8(2))
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
		c, err := decodeClaim(reply)
		if (c == nil) == (err == nil) {
			t.Fatalf("decodeClaim(%#v) = %v, %v: want exactly one", reply, c, err)
		}
		if err != nil && !errors.Is(err, ErrUnexpectedReply) {
			t.Fatalf("decodeClaim(%#v): unknown error %v", reply, err)
		}
	})
}
