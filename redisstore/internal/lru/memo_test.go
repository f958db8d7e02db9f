package lru

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMemo: a value is made once per key, by whoever stores first, up to
// MemoMax keys; past that, the caller's own is used and not kept.
func TestMemo(t *testing.T) {
	var m Memo[int, *int]
	_, ok := m.Load(1)
	require.False(t, ok)

	var wg sync.WaitGroup
	got := make([]*int, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := i
			got[i] = m.Store(1, &v)
		}()
	}
	wg.Wait()
	kept, ok := m.Load(1)
	require.True(t, ok)
	for _, v := range got {
		require.Same(t, kept, v, "every caller uses the value stored first")
	}

	for k := 2; k <= MemoMax+10; k++ {
		v := k
		require.Same(t, &v, m.Store(k, &v))
	}
	n := 0
	for k := 1; k <= MemoMax+10; k++ {
		if _, ok := m.Load(k); ok {
			n++
		}
	}
	require.LessOrEqual(t, n, MemoMax, "no more than MemoMax keys kept")
	require.Positive(t, n)
}
