package lru

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCache(t *testing.T) {
	yes := func(*string) bool { return true }
	later := time.Now().Add(time.Hour)

	t.Run("least recently used out first", func(t *testing.T) {
		c := New[string](30)
		c.Add("a", "A", 10, later)
		c.Add("b", "B", 10, later)
		c.Add("c", "C", 10, later)
		_, ok := c.Get("a", yes) // a is used: b is the least recent now
		require.True(t, ok)
		c.Add("d", "D", 10, later)
		_, ok = c.Get("b", yes)
		require.False(t, ok, "b should have gone")
		for _, k := range []string{"a", "c", "d"} {
			_, ok := c.Get(k, yes)
			require.True(t, ok, k)
		}
	})

	t.Run("a refused match is no use", func(t *testing.T) {
		c := New[string](20)
		c.Add("a", "A", 10, later)
		c.Add("b", "B", 10, later)
		_, ok := c.Get("a", func(v *string) bool { return *v == "other" })
		require.False(t, ok)
		c.Add("c", "C", 10, later) // a is still the least recently used
		_, ok = c.Get("a", yes)
		require.False(t, ok)
		_, ok = c.Get("b", yes)
		require.True(t, ok)
	})

	t.Run("replaced, expired, too large", func(t *testing.T) {
		c := New[string](20)
		c.Add("a", "A1", 10, later)
		c.Add("a", "A2", 10, later)
		v, ok := c.Get("a", yes)
		require.True(t, ok)
		require.Equal(t, "A2", v)
		require.Equal(t, 10, c.size, "the replaced value's cost is gone")

		c.Add("old", "O", 5, time.Now().Add(-time.Second))
		_, ok = c.Get("old", yes)
		require.False(t, ok, "an expired value is not kept")
		// On synctest's clock: kept until it expires, gone after.
		synctest.Test(t, func(t *testing.T) {
			c.Add("soon", "S", 5, time.Now().Add(time.Millisecond))
			_, ok := c.Get("soon", yes)
			require.True(t, ok, "kept until it expires")
			time.Sleep(2 * time.Millisecond)
			_, ok = c.Get("soon", yes)
			require.False(t, ok, "kept past its expiry")
		})
		require.Equal(t, 10, c.size, "an expired entry goes when it is asked for")

		c.Add("big", "B", 21, later)
		_, ok = c.Get("big", yes)
		require.False(t, ok, "larger than the cache")
		_, ok = c.Get("a", yes)
		require.True(t, ok, "and nothing went for it")

		c.Remove("a")
		c.Remove("none")
		_, ok = c.Get("a", yes)
		require.False(t, ok, "removed")
		require.Zero(t, c.size)
	})
}
