package idemclient

import (
	"context"
	"io"
	"math"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"1", time.Second, true},
		{" 120\t", 2 * time.Minute, true},
		{"0.25", 250 * time.Millisecond, true},
		{"1.5", 1500 * time.Millisecond, true},
		{"007", 7 * time.Second, true},
		{"99999999999999999999", time.Duration(math.MaxInt64), true},
		{"9223372036.9", time.Duration(math.MaxInt64), true},
		// HTTP-date, all three formats of RFC 9110.
		{"Sun, 01 Jun 2025 12:00:05 GMT", 5 * time.Second, true},
		{"Sunday, 01-Jun-25 12:01:00 GMT", time.Minute, true},
		{"Sun Jun  1 12:00:30 2025", 30 * time.Second, true},
		{"Sun, 01 Jun 2025 11:00:00 GMT", 0, true}, // in the past
		// Malformed.
		{"", 0, false},
		{"  ", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{"1e3", 0, false},
		{"1.", 0, false},
		{".5", 0, false},
		{"1.2.3", 0, false},
		{"0x10", 0, false},
		{"Inf", 0, false},
		{"NaN", 0, false},
		{"soon", 0, false},
		{"2025-06-01T12:00:05Z", 0, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			d, ok := ParseRetryAfter(tc.in, now)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, d)
		})
	}
}

func TestBackoffIsExponentialWithFullJitter(t *testing.T) {
	const almostOne = 1 - 1e-12
	for _, tc := range []struct {
		p     Policy
		retry int
		r     float64
		want  time.Duration
	}{
		{Policy{}, 1, 0.5, 50 * time.Millisecond}, // default base 100ms
		{Policy{}, 2, 0.5, 100 * time.Millisecond},
		{Policy{}, 3, 0.5, 200 * time.Millisecond},
		{Policy{}, 0, 0.5, 50 * time.Millisecond}, // counts as the first
		{Policy{}, 1, 0, 0},                       // full jitter starts at zero
		{Policy{}, 100, 0.5, 5 * time.Second},     // ceiling capped at the default 10s, no overflow
		{Policy{BaseDelay: time.Second, MaxDelay: 4 * time.Second}, 3, 0.5, 2 * time.Second},
		{Policy{BaseDelay: time.Second, MaxDelay: 4 * time.Second}, 10, 0.5, 2 * time.Second},
		{Policy{BaseDelay: time.Second, MaxDelay: 3 * time.Second}, 3, 0.5, 1500 * time.Millisecond},
		{Policy{}, 1, 2, 0},  // a broken source counts as 0
		{Policy{}, 1, -1, 0}, // likewise
	} {
		p := tc.p
		p.Rand = func() float64 { return tc.r }
		require.Equal(t, tc.want, p.backoff(tc.retry), "%+v retry %d rand %v", tc.p, tc.retry, tc.r)
	}
	// Every value stays below its ceiling.
	p := Policy{Rand: func() float64 { return almostOne }}
	for retry, ceiling := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 8: 10 * time.Second} {
		d := p.backoff(retry)
		require.Less(t, d, ceiling)
		require.Greater(t, d, ceiling-time.Millisecond)
	}
	// The default source spreads values over [0, ceiling).
	var lo, hi int
	for range 1000 {
		d := Policy{}.backoff(4) // ceiling 800ms
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.Less(t, d, 800*time.Millisecond)
		if d < 400*time.Millisecond {
			lo++
		} else {
			hi++
		}
	}
	require.Greater(t, lo, 300)
	require.Greater(t, hi, 300)
}

func TestDelayPrefersRetryAfterClamped(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	p := Policy{Rand: func() float64 { return 0.5 }}
	require.Equal(t, 3*time.Second, p.Delay(1, "3", now))
	require.Equal(t, 7*time.Second, p.Delay(1, now.Add(7*time.Second).Format(http.TimeFormat), now))
	require.Equal(t, defaultMaxRetryAfter, p.Delay(1, "3600", now))
	require.Equal(t, time.Duration(0), p.Delay(1, now.Add(-time.Hour).Format(http.TimeFormat), now))
	require.Equal(t, 50*time.Millisecond, p.Delay(1, "", now), "no Retry-After: backoff")
	require.Equal(t, 100*time.Millisecond, p.Delay(2, "later", now), "a malformed one: backoff")
	p.MaxRetryAfter = 2 * time.Second
	require.Equal(t, 2*time.Second, p.Delay(1, "3", now))
	require.Equal(t, 2*time.Second, p.clampRetryAfter(time.Hour))
	require.Equal(t, time.Duration(0), p.clampRetryAfter(-time.Second))
}

func TestPolicyRetryable(t *testing.T) {
	var p Policy
	for _, tc := range []struct {
		a     Attempt
		keyed bool
		want  bool
	}{
		{Attempt{Status: http.StatusConflict}, true, true},
		{Attempt{Status: http.StatusConflict}, false, false},
		{Attempt{Status: http.StatusTooManyRequests}, false, true},
		{Attempt{Status: http.StatusInternalServerError}, true, true},
		{Attempt{Status: http.StatusInternalServerError, Replayed: true}, true, false},
		{Attempt{Status: http.StatusServiceUnavailable, Replayed: true}, true, false},
		{Attempt{Status: http.StatusBadGateway}, true, true},
		{Attempt{Status: http.StatusGatewayTimeout}, true, true},
		{Attempt{Status: http.StatusCreated}, true, false},
		{Attempt{Status: http.StatusUnprocessableEntity}, true, false},
		{Attempt{Status: http.StatusRequestTimeout}, true, false},
		{Attempt{Err: context.DeadlineExceeded}, true, true},
		{Attempt{Err: io.ErrUnexpectedEOF, Status: http.StatusCreated}, true, true},
		{Attempt{Err: &net.DNSError{IsNotFound: true}}, true, false},
		{Attempt{Err: http.ErrSchemeMismatch}, true, false},
	} {
		require.Equal(t, tc.want, p.Retryable(tc.a, tc.keyed), "%+v keyed=%v", tc.a, tc.keyed)
	}
}
