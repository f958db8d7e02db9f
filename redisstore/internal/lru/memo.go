package lru

import (
	"sync"
	"sync/atomic"
)

// Memo keeps values made once each for a few distinct keys, such as the
// forms of the few retentions a program's routes set: past Max keys (a
// program that computes a new one per call), it keeps no more, and the
// caller makes them per call. The zero Memo is ready to use; it is safe
// for concurrent use.
type Memo[K comparable, V any] struct {
	m sync.Map // K -> V
	n atomic.Int32
}

// MemoMax is how many keys a Memo keeps.
const MemoMax = 64

// Load returns k's value, if kept.
func (m *Memo[K, V]) Load(k K) (V, bool) {
	v, ok := m.m.Load(k)
	if !ok {
		var none V
		return none, false
	}
	return v.(V), true
}

// Store keeps v as k's value while the Memo holds fewer than MemoMax keys,
// and returns the value to use: v, or the one another caller kept first.
func (m *Memo[K, V]) Store(k K, v V) V {
	if m.n.Add(1) <= MemoMax {
		if prev, loaded := m.m.LoadOrStore(k, v); loaded {
			return prev.(V)
		}
	}
	return v
}
