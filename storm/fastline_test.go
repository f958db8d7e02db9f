package storm

import (
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzHistoryLine: the hand-written parser of attempt and operation lines
// takes a line only as encoding/json reads it, member for member; a line
// it refuses goes to encoding/json.
func FuzzHistoryLine(f *testing.F) {
	for _, seed := range []string{
		`{"op":12,"key":"k","copy":0,"attempt":1,"sent_ns":0,"done_ns":100000000,"class":"timeout","status":0,"replayed":false,"body_sha256":"","retried":true,"probe":false,"error":"timeout: no answer"}`,
		`{"op":1,"key":"k","copy":2,"attempt":3,"sent_ns":5,"done_ns":9,"class":"original","status":201,"replayed":false,"body_sha256":"ab","retried":false,"probe":true,"size":17,"snippet":"{\"id\":\"\u00e9\\\/\n\ud83d\ude00\"}","oversize":true}`,
		`{"op":3,"key":"k","scheduled_ns":300000000,"ended_ns":310000000,"late":true}`,
		`{"op":3,"key":"k"}`,
		` { "op" : -0 , "key" : "" } `,
		`{"op":1e3}`, `{"op":1.5}`, `{"op":01}`, `{"op":1,"key":"\ud800"}`, `{"op":1,"key":"a` + "\xff" + `"}`,
		`{"op":1,"key":"\u00"}`, `{"op":1,"extra":[1]}`, `{"op":1,}`, `{"op":1}x`, `{"op":99999999999999999999}`,
		`{"op":1,"key":null}`, `{"op":1,"probe":True}`, `{"op":1,"key":"tab	"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var fast lineJSON
		if !parseFlat(line, &fast) {
			return
		}
		var slow lineJSON
		require.NoError(t, json.Unmarshal(line, &slow), "%q", line)
		require.Equal(t, sameDigest(slow), members(fast), "%q", line)
	})
}

func TestParseFlatTakesWhatTheWriterWrites(t *testing.T) {
	for _, a := range []Attempt{
		att(ClassOriginal, 201, `{"id":"é\"\\`+"\n\x01\u2028"+`"}`, 1, 2).probe().oversize(),
		att(ClassTimeout, 0, "", 0, 100).retried(),
	} {
		a.Key, a.Op = "01a24a2c-c0e0-7ac4-b231-f482430ba8a9", 7
		line := appendAttempt(nil, &a)
		var l lineJSON
		require.True(t, parseFlat(line, &l), "%s", line)
		var want lineJSON
		require.NoError(t, json.Unmarshal(line, &want))
		require.Equal(t, want, members(l))
	}
	op := Operation{Op: 3, Key: "k", Scheduled: 5, Ended: 9, Late: true}
	var l lineJSON
	require.True(t, parseFlat(appendOperation(nil, &op, true), &l))
	require.Equal(t, int64(5), l.ScheduledNS)
}

// members returns l as its members read, without what parseFlat keeps
// for itself: the key and the digest as encoding/json reads them.
func members(l lineJSON) lineJSON {
	if l.keyRaw != nil {
		l.Key = string(l.keyRaw)
	}
	if l.hasSum {
		l.BodySHA256 = hex.EncodeToString(l.sum[:])
	}
	l.opVal, l.attemptVal, l.scratch, l.keyRaw, l.sum, l.hasSum = 0, 0, nil, nil, [32]byte{}, false
	return l
}

// sameDigest puts a digest in lower case, as members writes it back.
func sameDigest(l lineJSON) lineJSON {
	if b, err := hex.DecodeString(l.BodySHA256); err == nil && len(b) == 32 {
		l.BodySHA256 = hex.EncodeToString(b)
	}
	return l
}
