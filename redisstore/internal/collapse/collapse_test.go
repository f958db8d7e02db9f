package collapse

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// left is a Holder whose lease has d left.
type left time.Duration

func (d left) Left() time.Duration { return time.Duration(d) }

func TestGroup(t *testing.T) {
	var g Group[string]
	fp, other := [16]byte{1}, [16]byte{2}

	f, leader := g.Join("k", &fp)
	require.True(t, leader)
	again, leader := g.Join("k", &fp)
	require.False(t, leader)
	require.Same(t, f, again, "a duplicate joins the flight")
	none, _ := g.Join("k", &other)
	require.Nil(t, none, "another fingerprint gets no flight")
	require.Nil(t, g.Get("k", &other))
	require.Same(t, f, g.Get("k", &fp))

	claimed, done := g.Claimed(f), g.Done(f)
	select {
	case <-claimed:
		t.Fatal("claimed before Settle")
	default:
	}
	g.Settle(f, "claim", nil, left(time.Second))
	<-claimed
	c, err := f.Claim()
	require.Equal(t, "claim", c)
	require.NoError(t, err)
	require.Equal(t, time.Second, g.Held(f))
	<-g.Claimed(f) // closed once settled, for later followers too

	g.End("k", f)
	<-done
	<-g.Done(f)
	require.Zero(t, g.Len())
	next, leader := g.Join("k", &fp)
	require.True(t, leader, "a new flight once the last ended")
	g.End("k", f) // a stale End leaves the new flight alone
	require.Same(t, next, g.Get("k", &fp))

	g.Settle(next, "", errors.New("down"), nil)
	_, err = next.Claim()
	require.Error(t, err)
	require.Zero(t, g.Held(next), "no hold without a lease")

	g.Drop("k") // whatever its fingerprint
	<-g.Done(next)
	require.Nil(t, g.Get("k", &fp))
	g.Drop("k") // nothing to drop
}

// TestGroupSweepsDeadFlights: flights whose lease is over and that nobody
// ended go, as new flights come, and live ones stay.
func TestGroupSweepsDeadFlights(t *testing.T) {
	var g Group[string]
	fp := [16]byte{1}
	for i := range 100 {
		f, _ := g.Join(fmt.Sprint("dead", i), &fp)
		g.Settle(f, "", nil, left(-time.Second))
	}
	live, _ := g.Join("live", &fp)
	g.Settle(live, "", nil, left(time.Hour))
	for i := range 101 {
		f, _ := g.Join(fmt.Sprint("new", i), &fp)
		g.End(fmt.Sprint("new", i), f)
	}
	require.Equal(t, 1, g.Len(), "the dead flights were not swept")
	require.Same(t, live, g.Get("live", &fp))
}
