package skew

import (
	"testing"
	"time"
)

func TestWall(t *testing.T) {
	now := time.Now()
	for _, d := range []time.Duration{time.Hour, -time.Hour, 90 * time.Second} {
		s := Wall(now, d)
		if got := s.Sub(now); got != 0 {
			t.Errorf("Wall(now, %v): monotonic moved by %v", d, got)
		}
		if got := s.Round(0).Sub(now.Round(0)); got != d {
			t.Errorf("Wall(now, %v): wall moved by %v", d, got)
		}
		if got := s.UnixNano() - now.UnixNano(); got != int64(d) {
			t.Errorf("Wall(now, %v): UnixNano moved by %v", d, time.Duration(got))
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("no panic for a time with no monotonic reading")
		}
	}()
	Wall(now.Round(0), time.Hour)
}
