package walk

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkey/idemkey/redisstore/internal/record"
)

// TestDecode: a key is a record, or says why it is not one.
func TestDecode(t *testing.T) {
	fp := record.Fingerprint("f")
	started := string(record.AppendStarted(nil, &fp, "12345678", "1000", &record.Started{Attempt: 2, Label: "l", CreatedMS: 7}))
	done := string(record.AppendCompleted(nil, &fp, 1, 201, []byte("body")))
	for _, tc := range []struct {
		name    string
		k       Key
		state   string
		problem string
	}{
		{"started", Key{Record: true, Value: started, Whole: true, TTL: 5 * time.Second}, "started", ""},
		{"completed", Key{Record: true, Value: done, Whole: true, TTL: -1}, "completed", ""},
		{"completed, head only", Key{Record: true, Value: done[:len(done)-2], TTL: -1}, "completed", ""},
		{"another name", Key{Type: "list"}, "", "not a key name idemkey writes (a list)"},
		{"the format before 0.2", Key{Record: true, Type: "hash"}, "", "a record in the format of idemkey before 0.2, which expires with its retention"},
		{"another type", Key{Record: true, Type: "set"}, "", "a set, not an idemkey record"},
		{"empty", Key{Record: true}, "", "an empty string, not an idemkey record"},
		{"corrupt", Key{Record: true, Value: "Sxyz", Whole: true}, "", "a string that is not an idemkey record"},
		{"started, too large", Key{Record: true, Value: started[:20], Size: 2 << 20}, "",
			"a started record of 2097152 bytes, more than Scan reads (1048576)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, problem := Decode(&tc.k)
			require.Equal(t, tc.problem, problem)
			if tc.state == "" {
				require.Nil(t, f)
				return
			}
			require.Equal(t, tc.state, f.State())
			require.Equal(t, string(fp[:]), f.Fingerprint)
		})
	}
	f, _ := Decode(&Key{Record: true, Value: started, Whole: true, TTL: 5 * time.Second})
	require.Equal(t, 5*time.Second, f.TTL, "the TTL in ms")
	require.Equal(t, 4*time.Second, f.LeaseTTL, "the lease: the TTL above the threshold")
}

// TestFilters: ScanOptions's filters and their validation.
func TestFilters(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	held := record.Found{Started: record.Started{Attempt: 1, CreatedMS: now.UnixMilli() - 60_000}, LeaseTTL: time.Second}
	expired := record.Found{Started: record.Started{Attempt: 1, CreatedMS: now.UnixMilli() - 1000}}
	released := record.Found{Released: true, Started: record.Started{Attempt: 2}}
	done := record.Found{Completed: true, Code: 200}
	for _, tc := range []struct {
		name string
		o    Options
		want []bool // held, expired, released, done
	}{
		{"none", Options{}, []bool{true, true, true, true}},
		{"started", Options{State: "started"}, []bool{true, true, false, false}},
		{"released", Options{State: "released"}, []bool{false, false, true, false}},
		{"completed", Options{State: "completed"}, []bool{false, false, false, true}},
		{"lease expired", Options{LeaseExpired: true}, []bool{false, true, true, false}},
		{"older than 10s: a known age only", Options{Older: 10 * time.Second}, []bool{true, false, false, false}},
		{"started and lease expired", Options{State: "started", LeaseExpired: true}, []bool{false, true, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Empty(t, tc.o.Problem())
			for i, f := range []*record.Found{&held, &expired, &released, &done} {
				require.Equal(t, tc.want[i], tc.o.keep(f, now), "record %d", i)
			}
		})
	}
	for _, o := range []Options{{State: "running"}, {Older: -1}, {Count: -1}} {
		require.NotEmpty(t, o.Problem(), "%+v", o)
	}
	require.True(t, strings.Contains((&Options{State: "x"}).Problem(), `"x"`))
}
