// Package refserver is a small in-memory Idempotency-Key server, right
// unless one of its defects is switched on: the test subject of idemkey
// verify (over HTTP) and of idemkeytest (in process), which must pass it
// as it is and fail each defect with the check that names it.
//
// POST (any path but /stats) runs once per (Authorization header, key), or
// per (caller, key) with Server.Callers:
// 201 with {"id":"pay_<n>"} and Location /pay/<n>; a retry gets the same,
// marked Idempotent-Replayed: true; a duplicate of a running request waits
// for it (or gets 409, with Conflict); another body with the same key gets
// 422; no key, 400. GET /stats answers {"runs": <n>}, the side effects.
package refserver

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Server is the reference server. Set its fields before the first request;
// it is safe for concurrent use.
type Server struct {
	NoIdempotency  bool // every request runs, key or no key
	IgnoreBody     bool // the fingerprint leaves the body out: a changed body replays
	KeyOptional    bool // a request without a key runs, answered 200
	DropLocation   bool // replays lose Location
	NoReplayHeader bool // replays are not marked Idempotent-Replayed: true
	SharedScope    bool // keys are not scoped by caller: one caller's key replays to another
	// Callers, when set, names the caller of each Authorization value
	// (several tokens of one caller, as refreshed): keys are scoped by
	// caller. Without it they are scoped by the Authorization header
	// itself, the credential, as idemkey's default scope does.
	Callers map[string]string
	// LockOnly holds a key only while its request runs: duplicates get
	// 409 (with Conflict's Retry-After, "1" without), and once it is done
	// the key is forgotten, so a retry runs again.
	LockOnly bool
	// Conflict, when set, answers duplicates of a running request 409 with
	// this Retry-After ("-" for none) instead of making them wait.
	Conflict string
	// Hold makes the first run wait until this many duplicates have been
	// answered 409, so that they surely overlap (bounded by 10 s).
	Hold int

	runs      atomic.Int64
	once      sync.Once
	mu        sync.Mutex
	records   map[string]*record
	created   int // records ever made
	conflicts int
	held      chan struct{} // closed once Hold 409s went out
}

type record struct {
	fp       string
	done     chan struct{}
	status   int
	body     []byte
	location string
}

// Runs returns how many times a request ran: the side effects.
func (s *Server) Runs() int64 { return s.runs.Load() }

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.once.Do(func() {
		s.records = map[string]*record{}
		s.held = make(chan struct{})
	})
	if r.URL.Path == "/stats" {
		fmt.Fprintf(w, `{"runs": %d}`, s.runs.Load())
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	key := r.Header.Get("Idempotency-Key")
	switch {
	case s.NoIdempotency:
		s.run(w, http.StatusCreated)
		return
	case key == "" && s.KeyOptional:
		s.run(w, http.StatusOK)
		return
	case key == "":
		http.Error(w, "Idempotency-Key is required", http.StatusBadRequest)
		return
	case len(key) > 255 || strings.ContainsFunc(key, func(r rune) bool { return r < '!' || r > '~' }):
		http.Error(w, "malformed Idempotency-Key", http.StatusBadRequest)
		return
	}
	fp := r.Method + " " + r.URL.RequestURI()
	if !s.IgnoreBody {
		fp += "\n" + string(body)
	}
	id := key
	if !s.SharedScope {
		caller := r.Header.Get("Authorization")
		if c, ok := s.Callers[caller]; ok {
			caller = "caller " + c
		}
		id = caller + "\x00" + key
	}
	s.mu.Lock()
	rec := s.records[id]
	if rec == nil {
		rec = &record{fp: fp, done: make(chan struct{})}
		s.records[id] = rec
		s.created++
		first := s.created == 1
		s.mu.Unlock()
		if first && s.Hold > 0 {
			select {
			case <-s.held:
			case <-time.After(10 * time.Second):
			}
		}
		n := s.runs.Add(1)
		rec.status, rec.location = http.StatusCreated, fmt.Sprintf("/pay/%d", n)
		rec.body = fmt.Appendf(nil, `{"id":"pay_%d"}`, n)
		if s.LockOnly {
			s.mu.Lock()
			delete(s.records, id)
			s.mu.Unlock()
		}
		close(rec.done)
		w.Header().Set("Location", rec.location)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body)
		return
	}
	if rec.fp != fp {
		s.mu.Unlock()
		http.Error(w, "the key was used for another request", http.StatusUnprocessableEntity)
		return
	}
	if conflict := s.conflict(); conflict != "" {
		select {
		case <-rec.done:
		default:
			s.conflicts++
			if s.conflicts == s.Hold {
				close(s.held)
			}
			s.mu.Unlock()
			if conflict != "-" {
				w.Header().Set("Retry-After", conflict)
			}
			http.Error(w, "in progress", http.StatusConflict)
			return
		}
	}
	s.mu.Unlock()
	select {
	case <-rec.done:
	case <-r.Context().Done():
		return
	}
	if !s.DropLocation {
		w.Header().Set("Location", rec.location)
	}
	w.Header().Set("Content-Type", "application/json")
	if !s.NoReplayHeader {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body)
}

// conflict is the Retry-After of a 409 for a running request; "" when
// duplicates wait instead.
func (s *Server) conflict() string {
	if s.Conflict == "" && s.LockOnly {
		return "1"
	}
	return s.Conflict
}

func (s *Server) run(w http.ResponseWriter, status int) {
	n := s.runs.Add(1)
	w.Header().Set("Location", fmt.Sprintf("/pay/%d", n))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"id":"pay_%d"}`, n)
}
