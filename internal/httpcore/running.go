package httpcore

import (
	"context"
	"sync"
)

// running is the exchanges of a Guard with Options.Shutdown, cancelled
// together at the cutoff (ShutdownGrace after Shutdown): a list the
// exchanges are linked into, where a context.AfterFunc per request would
// cost three allocations and a map entry in the cutoff's context. It is
// safe for concurrent use.
type running struct {
	mu   sync.Mutex
	cut  bool      // the cutoff has come
	head *Exchange // linked by Exchange.prev and next
}

// add links x, whose run cancel cancels; after the cutoff, it cancels x at
// once instead.
func (s *running) add(x *Exchange, cancel context.CancelCauseFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		cancel(ErrShutdown)
		return
	}
	x.next = s.head
	if s.head != nil {
		s.head.prev = x
	}
	s.head, x.linked = x, true
}

// remove unlinks x: once it returns, the cutoff no longer cancels x.
func (s *running) remove(x *Exchange) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !x.linked {
		return
	}
	if x.prev != nil {
		x.prev.next = x.next
	} else {
		s.head = x.next
	}
	if x.next != nil {
		x.next.prev = x.prev
	}
	x.prev, x.next, x.linked = nil, nil, false
}

// cutAll cancels every exchange still running, with cause ErrShutdown,
// and every one added from now on.
func (s *running) cutAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut = true
	// Under the lock, so that no exchange is cancelled once remove has
	// returned for it (its run is over and its outcome being stored). A
	// context's cancel calls nothing of ours.
	for x := s.head; x != nil; x = x.next {
		x.cancel(ErrShutdown)
	}
}
