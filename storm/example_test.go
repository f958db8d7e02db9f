package storm_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/idemkey/idemkey/storm"
)

// A Go test points a storm at a server and asserts on the report: here a
// server that runs every key once and replays it after, with a lock while
// it runs.
func ExampleRun() {
	var mu sync.Mutex
	stored := map[string][]byte{}
	charges := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		defer mu.Unlock() // one request at a time: the lock a real store takes per key
		if body, ok := stored[key]; ok {
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(body)
			return
		}
		charges++
		stored[key] = fmt.Appendf(nil, `{"charge":%d}`, charges)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(stored[key])
	}))
	defer srv.Close()

	var history bytes.Buffer
	rep, err := storm.Run(context.Background(), storm.Config{URL: srv.URL, Keys: 20, Dups: 5, History: &history})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(rep.Verdict(), rep.KeysPassed, rep.Originals, rep.Replays, charges)

	// The history, read back, is judged the same.
	h, err := storm.ReadHistory(&history)
	if err != nil {
		fmt.Println(err)
		return
	}
	again, _ := storm.Check(h)
	fmt.Println(again.Verdict())
	// Output:
	// pass 20 20 80 20
	// pass
}

// A history is plain data: what a test, a fault schedule or another load
// generator recorded can be judged without storm sending anything. Here a
// key's first attempt timed out, its retry ran the request, and the late
// probe got the replay: from the answers alone, the attempt that timed out
// may have run too.
func ExampleCheck() {
	body := []byte(`{"id":"pay_1"}`)
	sum := sha256.Sum256(body)
	h := &storm.History{
		Header: storm.Header{Version: storm.HistoryVersion, URL: "http://127.0.0.1:8080/v1/payments", Method: "POST",
			Settings: storm.Settings{Mode: "burst", Keys: 1, Dups: 1, Timeout: 10 * time.Second, Probe: true}},
		Operations: []storm.Operation{{Op: 0, Key: "k1", Attempts: []storm.Attempt{
			{Key: "k1", Attempt: 1, Sent: 0, Done: 200 * time.Millisecond, Class: storm.ClassTimeout, Retried: true},
			{Key: "k1", Attempt: 2, Sent: 300 * time.Millisecond, Done: 320 * time.Millisecond, Class: storm.ClassOriginal,
				Status: 201, BodySHA256: sum},
			{Key: "k1", Attempt: 1, Sent: time.Second, Done: time.Second + time.Millisecond, Class: storm.ClassReplay,
				Status: 201, Replayed: true, BodySHA256: sum, Probe: true},
		}}},
		End: &storm.End{Elapsed: time.Second},
	}
	rep, _ := storm.Check(h)
	fmt.Println(rep.Verdict(), rep.Inconclusive[0].Rule)

	// The service's ledger shows one charge for the key: it ran once.
	h.Ledger = []storm.Effect{{Key: "k1", Effect: "charge"}}
	rep, _ = storm.Check(h)
	fmt.Println(rep.Verdict())
	// Output:
	// inconclusive at-most-once
	// pass
}
