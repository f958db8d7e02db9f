package redisstore

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDecodeClaim(t *testing.T) {
	tests := []struct {
		name    string
		reply   any
		want    *Claim
		wantErr error
	}{
		{"claimed", []any{int64(1), int64(1), "", ""}, &Claim{Status: Claimed, Lease: &Lease{Attempt: 1}}, nil},
		{"took over", []any{int64(1), int64(3), "charged", "ch_1"},
			&Claim{Status: TookOver, Lease: &Lease{Attempt: 3, RecoveryPoint: "charged", RecoveryData: []byte("ch_1")}}, nil},
		{"replay", []any{int64(2), int64(201), "body"}, &Claim{Status: Replayed, Response: Response{Code: 201, Body: []byte("body")}}, nil},
		{"replay of empty body", []any{int64(2), int64(204), ""}, &Claim{Status: Replayed, Response: Response{Code: 204, Body: []byte{}}}, nil},
		{"mismatch", []any{int64(4)}, nil, ErrMismatch},
		{"not a list", "OK", nil, ErrUnexpectedReply},
		{"empty list", []any{}, nil, ErrUnexpectedReply},
		{"unknown code", []any{int64(9)}, nil, ErrUnexpectedReply},
		{"code as string", []any{"1", int64(1), "", ""}, nil, ErrUnexpectedReply},
		{"short owned", []any{int64(1), int64(1)}, nil, ErrUnexpectedReply},
		{"zero attempt", []any{int64(1), int64(0), "", ""}, nil, ErrUnexpectedReply},
		{"replay without body", []any{int64(2), int64(200)}, nil, ErrUnexpectedReply},
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

	t.Run("in progress", func(t *testing.T) {
		_, err := decodeClaim([]any{int64(3), int64(1500)})
		var ip *InProgressError
		require.ErrorAs(t, err, &ip)
		require.ErrorIs(t, err, ErrInProgress)
		require.Equal(t, 1500*time.Millisecond, ip.LeaseLeft)
		_, err = decodeClaim([]any{int64(3), int64(-1)})
		require.ErrorAs(t, err, &ip)
		require.Zero(t, ip.LeaseLeft)
	})
}

// FuzzDecodeClaim feeds the decoder replies of every shape a Redis reply can
// take: it must return a claim or an error, never panic, and never both.
func FuzzDecodeClaim(f *testing.F) {
	f.Add(int64(1), int64(1), "", "", uint8(4))
	f.Add(int64(1), int64(2), "charged", "data", uint8(4))
	f.Add(int64(2), int64(201), "body", "", uint8(3))
	f.Add(int64(3), int64(900), "", "", uint8(2))
	f.Add(int64(4), int64(0), "", "", uint8(1))
	f.Add(int64(7), int64(-5), "x", "y", uint8(0))
	f.Fuzz(func(t *testing.T, code, n int64, s1, s2 string, shape uint8) {
		elems := []any{code, n, s1, s2, nil, int64(0), []any{s1}}
		// shape picks the length and, in its high bits, swaps element types.
		reply := elems[:shape%5]
		if shape&0x80 != 0 && len(reply) > 1 {
			reply = append([]any{}, reply...)
			reply[1] = s1
		}
		if shape&0x40 != 0 && len(reply) > 2 {
			reply = append([]any{}, reply...)
			reply[2] = elems[6]
		}
		c, err := decodeClaim(reply)
		if (c == nil) == (err == nil) {
			t.Fatalf("decodeClaim(%#v) = %v, %v: want exactly one", reply, c, err)
		}
		if err != nil && !errors.Is(err, ErrUnexpectedReply) && !errors.Is(err, ErrMismatch) && !errors.Is(err, ErrInProgress) {
			t.Fatalf("decodeClaim(%#v): unknown error %v", reply, err)
		}
		if c != nil && (c.Status == Replayed) == (c.Lease != nil) {
			t.Fatalf("decodeClaim(%#v) = %+v: a replay has no lease, an owner has one", reply, c)
		}
	})
}
