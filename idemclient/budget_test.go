package idemclient

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNewBudgetRejectsBadOptions(t *testing.T) {
	for _, o := range []BudgetOptions{{Burst: -1}, {Ratio: -0.1}, {PerSecond: math.NaN()}, {Burst: math.Inf(1)}, {MaxHosts: -1}} {
		_, err := NewBudget(o)
		require.Error(t, err, "%+v", o)
	}
	b, err := NewBudget(BudgetOptions{})
	require.NoError(t, err)
	require.Equal(t, BudgetOptions{Burst: 10, Ratio: 0.2, PerSecond: 1, MaxHosts: 1024}, b.Options())
}

func TestBudgetTokens(t *testing.T) {
	b, err := NewBudget(BudgetOptions{Burst: 3, Ratio: 0.5, PerSecond: 2})
	require.NoError(t, err)
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	require.Equal(t, 3.0, b.Tokens("api.example:443", t0), "a new host starts full")
	for range 3 {
		require.True(t, b.withdraw("api.example:443", t0))
	}
	require.False(t, b.withdraw("api.example:443", t0), "empty")
	require.True(t, b.withdraw("API.example:443", t0.Add(time.Second)) && b.withdraw("api.example:443", t0.Add(time.Second)), "two tokens a second, host names folded")
	require.False(t, b.withdraw("api.example:443", t0.Add(time.Second)))
	b.deposit("api.example:443", t0.Add(time.Second))
	require.False(t, b.withdraw("api.example:443", t0.Add(time.Second)), "half a token")
	b.deposit("api.example:443", t0.Add(time.Second))
	require.True(t, b.withdraw("api.example:443", t0.Add(time.Second)), "two requests, one retry")
	require.Equal(t, 3.0, b.Tokens("api.example:443", t0.Add(time.Hour)), "refills up to Burst")
	require.Equal(t, 3.0, b.Tokens("other:80", t0), "hosts are separate")
	require.Equal(t, 3.0, b.Tokens("api.example:443", t0), "a clock that goes back adds nothing")
}

func TestBudgetBoundsItsHosts(t *testing.T) {
	b, err := NewBudget(BudgetOptions{MaxHosts: 4})
	require.NoError(t, err)
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 100 {
		require.True(t, b.withdraw(fmt.Sprintf("h%d:80", i), t0))
		require.LessOrEqual(t, len(b.hosts), 4)
	}
	// Full buckets go first.
	b, err = NewBudget(BudgetOptions{MaxHosts: 2, Burst: 2})
	require.NoError(t, err)
	require.True(t, b.withdraw("busy:80", t0))
	b.Tokens("idle:80", t0)
	b.Tokens("new:80", t0)
	require.Len(t, b.hosts, 2)
	require.Contains(t, b.hosts, "busy:80")
	require.Contains(t, b.hosts, "new:80")
}
