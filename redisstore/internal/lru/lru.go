// Package lru is a cache bounded in bytes, each entry kept until it
// expires, the least recently used out first when it is full. It knows
// nothing of what it holds: the caller says what an entry costs. Memo,
// beside it, keeps a few values made once each, bounded in count.
package lru

import (
	"container/list"
	"sync"
	"time"
)

// Cache holds values of type V by key. It is safe for concurrent use.
type Cache[V any] struct {
	mu    sync.Mutex
	max   int
	size  int
	order *list.List // of *entry[V], least recently used first
	m     map[string]*list.Element
}

type entry[V any] struct {
	key     string
	val     V
	cost    int
	expires time.Time
}

// New returns a Cache of at most max bytes.
func New[V any](max int) *Cache[V] {
	return &Cache[V]{max: max, order: list.New(), m: map[string]*list.Element{}}
}

// Get returns key's value if it has one that has not expired and that
// match accepts; only then does the entry count as used. An expired entry
// goes.
func (c *Cache[V]) Get(key string, match func(*V) bool) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var none V
	e, ok := c.m[key]
	if !ok {
		return none, false
	}
	en := e.Value.(*entry[V])
	if time.Now().After(en.expires) {
		c.remove(e)
		return none, false
	}
	if !match(&en.val) {
		return none, false
	}
	c.order.MoveToBack(e) // used now: the last to go
	return en.val, true
}

// Add keeps v as key's value until expires, in place of the value it had,
// at cost bytes: the least recently used entries go until the cache fits.
// A value that expired already, or that costs more than the whole cache,
// is not kept.
func (c *Cache[V]) Add(key string, v V, cost int, expires time.Time) {
	if cost > c.max || time.Until(expires) <= 0 {
		return
	}
	en := &entry[V]{key: key, val: v, cost: cost, expires: expires}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[key]; ok {
		c.remove(e)
	}
	c.m[key] = c.order.PushBack(en)
	c.size += cost
	for c.size > c.max {
		c.remove(c.order.Front())
	}
}

// Remove drops key's value, if any.
func (c *Cache[V]) Remove(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[key]; ok {
		c.remove(e)
	}
}

func (c *Cache[V]) remove(e *list.Element) {
	en := c.order.Remove(e).(*entry[V])
	delete(c.m, en.key)
	c.size -= en.cost
}
