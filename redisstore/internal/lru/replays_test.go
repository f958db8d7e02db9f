package lru

import (
	"testing"
	"time"
)

func TestReplays(t *testing.T) {
	r := NewReplays(1 << 20)
	fp, other := [16]byte{1}, [16]byte{2}
	body := []byte("outcome")
	r.Keep("k", &fp, 201, body, time.Now().Add(time.Hour))
	body[0] = 'X' // the caller reuses its buffer
	o, ok := r.Replay("k", &fp)
	if !ok || o.Code != 201 || string(o.Body) != "outcome" {
		t.Fatalf("Replay = %+v, %v; want 201 outcome, kept as it was given", o, ok)
	}
	if _, ok := r.Replay("k", &other); ok {
		t.Fatal("an outcome replayed for another fingerprint")
	}
	r.Remove("k")
	if _, ok := r.Replay("k", &fp); ok {
		t.Fatal("replayed after Remove")
	}
}
