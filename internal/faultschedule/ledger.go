package faultschedule

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// Ledger is the service's record of its side effects, outside Redis: JSON
// Lines appended to a file, each synced to disk before its writer goes
// on, in the format storm.ReadLedger reads. Concurrent writers share
// their syncs (group commit): one fsync covers every line written before
// it. Its methods are safe for concurrent use.
type Ledger struct {
	mu      sync.Mutex // the file's end, written
	f       *os.File
	path    string
	err     error
	written int64

	syncMu sync.Mutex // synced
	synced int64
}

// ledgerLine is one line: an effect, or the refusal of an execution's
// completion.
type ledgerLine struct {
	Key       string     `json:"key"`
	Effect    string     `json:"effect,omitempty"`
	Execution string     `json:"execution"`
	Attempt   int        `json:"attempt,omitempty"`
	Start     *time.Time `json:"start,omitempty"`
	End       *time.Time `json:"end,omitempty"`
	Refused   bool       `json:"refused,omitempty"`
	NotStored bool       `json:"not_stored,omitempty"`
}

// OpenLedger creates (or truncates) the ledger file at path.
func OpenLedger(path string) (*Ledger, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Ledger{f: f, path: path}, nil
}

// Path returns the ledger's file name.
func (l *Ledger) Path() string { return l.path }

// write appends one line and returns once it is on disk: whatever
// happens next, the effect is on record.
func (l *Ledger) write(line ledgerLine) {
	b, err := json.Marshal(line)
	if err != nil {
		panic(err) // plain strings, times and ints
	}
	b = append(b, '\n')
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	if _, err := l.f.Write(b); err != nil {
		l.err = err
	}
	l.written++
	n := l.written
	l.mu.Unlock()

	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	if l.synced >= n {
		return // a sync that started after our write covered it
	}
	l.mu.Lock()
	upto := l.written
	l.mu.Unlock()
	if err := l.f.Sync(); err != nil {
		l.mu.Lock()
		if l.err == nil {
			l.err = err
		}
		l.mu.Unlock()
	}
	l.synced = upto
}

// Effect records an execution's side effect.
func (l *Ledger) Effect(key, execution string, token int, start, end time.Time) {
	l.write(ledgerLine{Key: key, Effect: "charge", Execution: execution, Attempt: token, Start: &start, End: &end})
}

// Refused records that the store refused the completion of an execution:
// its effect does not count.
func (l *Ledger) Refused(key, execution string) {
	l.write(ledgerLine{Key: key, Execution: execution, Refused: true})
}

// NotStored records that the store could not store an execution's
// outcome: a retry may run the key again.
func (l *Ledger) NotStored(key, execution string) {
	l.write(ledgerLine{Key: key, Execution: execution, NotStored: true})
}

// Close closes the file and returns the first error of a write or sync.
func (l *Ledger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.f.Close(); err != nil && l.err == nil {
		l.err = fmt.Errorf("ledger: %w", err)
	}
	return l.err
}
