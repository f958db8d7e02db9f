package bench

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemkey/idemkey/storm"
)

// The fault-schedule checker (storm.CheckSchedule) on a long history, and
// its one-answer property against porcupine's linearizability check of a
// first-writer-wins register per key, which it replaces.

var genEpoch = time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)

// genScheduleHistory returns a load-mode history of ops operations with
// the ledger a service would have written: per operation one or two
// copies, some lost attempts and 409s retried, one execution (a refused
// one before it now and then), the late probe's replay; every 1,000th key
// broken (two executions, or a different replay).
func genScheduleHistory(ops int, seed uint64) *storm.History {
	rng := rand.New(rand.NewPCG(seed, 1))
	h := &storm.History{Header: storm.Header{Version: storm.HistoryVersion, URL: "http://127.0.0.1:1/charge", Method: "POST",
		Started: genEpoch, Settings: storm.Settings{Mode: "load", KeyHeader: "Idempotency-Key", Keys: ops, Dups: 2, Timeout: 10 * time.Second}},
		End: &storm.End{Elapsed: time.Duration(ops) * time.Millisecond}}
	h.Operations = make([]storm.Operation, ops)
	h.Ledger = make([]storm.Effect, 0, ops+ops/10)
	for i := range h.Operations {
		key := fmt.Sprintf("k-%07d", i)
		t0 := time.Duration(i) * time.Millisecond
		body := sha256.Sum256([]byte(key))
		other := sha256.Sum256([]byte(key + "!"))
		op := storm.Operation{Op: i, Key: key, Scheduled: t0}
		at := func(c, n int, class storm.Class, status int, sent, done time.Duration, retried bool) storm.Attempt {
			a := storm.Attempt{Op: i, Key: key, Copy: c, Attempt: n, Sent: sent, Done: done, Class: class, Status: status, Retried: retried}
			if class.Answered() {
				a.BodySHA256, a.Replayed = body, class == storm.ClassReplay
			}
			return a
		}
		ms := time.Millisecond
		switch rng.IntN(4) {
		case 0: // a lost attempt, then the original
			op.Attempts = append(op.Attempts, at(0, 1, storm.ClassTimeout, 0, t0, t0+250*ms, true), at(0, 2, storm.ClassOriginal, 201, t0+300*ms, t0+310*ms, false))
		case 1: // two copies: original and a 409 then replay
			op.Attempts = append(op.Attempts, at(0, 1, storm.ClassOriginal, 201, t0, t0+10*ms, false),
				at(1, 1, storm.ClassInProgress, 409, t0, t0+ms, true), at(1, 2, storm.ClassReplay, 201, t0+100*ms, t0+101*ms, false))
		default:
			op.Attempts = append(op.Attempts, at(0, 1, storm.ClassOriginal, 201, t0, t0+10*ms, false))
		}
		op.Attempts = append(op.Attempts, at(0, 1, storm.ClassReplay, 201, t0+time.Second, t0+time.Second+ms, false))
		op.Attempts[len(op.Attempts)-1].Probe = true
		start := genEpoch.Add(t0 + ms)
		if rng.IntN(10) == 0 { // a refused run before the one that counts
			id := key + "/r"
			h.Ledger = append(h.Ledger, storm.Effect{Key: key, Effect: "charge", Execution: id, Attempt: 1, Start: start, End: start.Add(2 * ms)},
				storm.Effect{Key: key, Execution: id, Refused: true})
		}
		h.Ledger = append(h.Ledger, storm.Effect{Key: key, Effect: "charge", Execution: key + "/1", Attempt: 2, Start: start.Add(3 * ms), End: start.Add(5 * ms)})
		if i%1000 == 999 {
			if i%2000 == 999 {
				h.Ledger = append(h.Ledger, storm.Effect{Key: key, Effect: "charge", Execution: key + "/2", Attempt: 3, Start: start.Add(6 * ms), End: start.Add(7 * ms)})
			} else {
				op.Attempts[len(op.Attempts)-1].BodySHA256 = other
			}
		}
		h.Operations[i] = op
	}
	return h
}

// registerModel is a first-writer-wins register: the state is the first
// answer ("" before any), a known answer must equal it (or set it), an
// unknown one (a lost attempt) changes nothing it could contradict.
var registerModel = porcupine.Model{
	Init: func() any { return "" },
	Step: func(state, _, output any) (bool, any) {
		s, out := state.(string), output.(string)
		switch {
		case out == "":
			return true, s
		case s == "" || s == out:
			return true, out
		}
		return false, s
	},
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(string)
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
}

// registerOps turns a history's attempts into porcupine operations: every
// final answer with its output, every lost attempt with an unknown one
// that may still be running (it never returns).
func registerOps(h *storm.History) []porcupine.Operation {
	var ops []porcupine.Operation
	for _, op := range h.Operations {
		for _, a := range op.Attempts {
			final := !a.Retried && (a.Class.Executes() || a.Class == storm.ClassReplay)
			switch {
			case final:
				ops = append(ops, porcupine.Operation{Input: op.Key, Output: fmt.Sprintf("%d %x", a.Status, a.BodySHA256), Call: int64(a.Sent), Return: int64(a.Done)})
			case a.Class.Lost():
				ops = append(ops, porcupine.Operation{Input: op.Key, Output: "", Call: int64(a.Sent), Return: math.MaxInt64})
			}
		}
	}
	return ops
}

// TestScheduleCheckerMatchesPorcupine: on random small histories the hand-
// written one-answer property and porcupine agree, key by key.
func TestScheduleCheckerMatchesPorcupine(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	answers := [][32]byte{sha256.Sum256([]byte("a")), sha256.Sum256([]byte("b"))}
	classes := []storm.Class{storm.ClassOriginal, storm.ClassReplay, storm.ClassTimeout, storm.ClassInProgress}
	agreeBroken := 0
	for k := range 2000 {
		key := fmt.Sprintf("k%d", k)
		h := &storm.History{Header: storm.Header{Settings: storm.Settings{Mode: "burst"}}, Ledger: []storm.Effect{}}
		op := storm.Operation{Key: key}
		for n := range 1 + rng.IntN(5) {
			sent := time.Duration(rng.IntN(100)) * time.Millisecond
			c := classes[rng.IntN(len(classes))]
			a := storm.Attempt{Key: key, Copy: n, Attempt: 1, Class: c, Sent: sent, Done: sent + time.Duration(1+rng.IntN(50))*time.Millisecond}
			if c.Answered() {
				a.Status, a.BodySHA256 = 201, answers[rng.IntN(2)]
			}
			a.Retried = c == storm.ClassInProgress
			op.Attempts = append(op.Attempts, a)
		}
		h.Operations = []storm.Operation{op}
		r, err := storm.CheckSchedule(h, storm.ScheduleOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mine := r.Counts[storm.PropOneAnswer] == 0
		theirs := porcupine.CheckOperations(registerModel, registerOps(h))
		if mine != theirs {
			t.Fatalf("key %d: hand-written one-answer says linearizable=%v, porcupine %v: %+v", k, mine, theirs, op.Attempts)
		}
		if !mine {
			agreeBroken++
		}
	}
	t.Logf("2,000 random keys: both checkers agree on every key (%d not linearizable)", agreeBroken)
	if agreeBroken == 0 || agreeBroken == 2000 {
		t.Fatalf("the random histories do not exercise both verdicts (%d broken)", agreeBroken)
	}
}

// scheduleOpts judges every property of a generated history: liveness
// from its start, a mismatch probe per 100 keys (answered 422).
func scheduleOpts(h *storm.History) storm.ScheduleOptions {
	var foreign []storm.Attempt
	for i := 0; i < len(h.Operations); i += 100 {
		foreign = append(foreign, storm.Attempt{Op: i, Key: h.Operations[i].Key, Class: storm.ClassMismatch, Status: 422})
	}
	return storm.ScheduleOptions{Foreign: foreign, Bound: 10 * time.Second}
}

// TestScheduleCheck100k times storm.CheckSchedule on a 100,000-operation
// history, read back from its files as a test would, and porcupine's
// check of the same register, and checks that they agree. It logs the
// times (bench/RESULTS.md records them); no time decides it.
func TestScheduleCheck100k(t *testing.T) {
	gen := genScheduleHistory(100_000, 1)
	dir := t.TempDir()
	histPath, ledgerPath := filepath.Join(dir, "history.jsonl"), filepath.Join(dir, "ledger.jsonl")
	writeFiles(t, gen, histPath, ledgerPath)

	start := time.Now()
	h := readFiles(t, histPath, ledgerPath)
	read := time.Since(start)
	attempts := 0
	for _, op := range h.Operations {
		attempts += len(op.Attempts)
	}
	start = time.Now()
	r, err := storm.CheckSchedule(h, scheduleOpts(h))
	mine := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if r.Counts[storm.PropAtMostOnce] != 50 || r.Counts[storm.PropOneAnswer] != 50 || r.Counts[storm.PropLiveness] != 0 ||
		r.Counts[storm.PropMismatch] != 0 {
		t.Fatalf("want 50 keys run twice and 50 with two answers:\n%s", r)
	}
	ops := registerOps(h)
	start = time.Now()
	res := porcupine.CheckOperationsTimeout(registerModel, ops, time.Minute)
	theirs := time.Since(start)
	if res != porcupine.Illegal {
		t.Fatalf("porcupine: %v, want illegal (50 keys with two answers)", res)
	}
	t.Logf("100,000 operations, %d attempts, %d ledger lines: reading both files %v; storm.CheckSchedule (every property) %v; "+
		"porcupine (one-answer only, %d operations) %v",
		attempts, len(h.Ledger), read.Round(time.Millisecond), mine.Round(time.Millisecond), len(ops), theirs.Round(time.Millisecond))
}

func writeFiles(t *testing.T, h *storm.History, histPath, ledgerPath string) {
	t.Helper()
	hf, err := os.Create(histPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteTo(hf); err != nil {
		t.Fatal(err)
	}
	if err := hf.Close(); err != nil {
		t.Fatal(err)
	}
	lf, err := os.Create(ledgerPath)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(lf)
	enc := json.NewEncoder(w)
	for _, e := range h.Ledger {
		line := map[string]any{"key": e.Key, "execution": e.Execution}
		if e.Effect != "" {
			line["effect"], line["attempt"], line["start"], line["end"] = e.Effect, e.Attempt, e.Start, e.End
		}
		if e.Refused {
			line["refused"] = true
		}
		if err := enc.Encode(line); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := lf.Close(); err != nil {
		t.Fatal(err)
	}
}

func readFiles(t *testing.T, histPath, ledgerPath string) *storm.History {
	t.Helper()
	hf, err := os.Open(histPath)
	if err != nil {
		t.Fatal(err)
	}
	defer hf.Close()
	h, err := storm.ReadHistory(hf)
	if err != nil {
		t.Fatal(err)
	}
	lf, err := os.Open(ledgerPath)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if h.Ledger, err = storm.ReadLedger(lf); err != nil {
		t.Fatal(err)
	}
	return h
}

// BenchmarkCheckSchedule100k is TestScheduleCheck100k's check alone.
func BenchmarkCheckSchedule100k(b *testing.B) {
	h := genScheduleHistory(100_000, 1)
	opts := scheduleOpts(h)
	b.ResetTimer()
	for b.Loop() {
		if _, err := storm.CheckSchedule(h, opts); err != nil {
			b.Fatal(err)
		}
	}
}
