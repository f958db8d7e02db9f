package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCutOffRunThatPanicsIsTakenOver: a run whose context was cut off (its
// caller gave up, MaxDuration passed) after its side effect, and that then
// panics (a nil result from a call made on the cancelled context), keeps
// its record: the retry takes it over as attempt 2, which tells it to
// reconcile with the provider rather than charge, so the side effect
// happens once. Do used to release the key
// on any panic, so the retry ran as a fresh attempt 1 and charged again
// (attempt=1 charges=2).
func TestCutOffRunThatPanicsIsTakenOver(t *testing.T) {
	for _, b := range []struct {
		name string
		b    func(*testing.T) backend
	}{{"miniredis", miniBackend}, {"redis", realBackend}} {
		t.Run(b.name, func(t *testing.T) {
			for _, cut := range []string{"caller's context", "MaxDuration"} {
				t.Run(cut, func(t *testing.T) {
					opts := Options{}
					if cut == "MaxDuration" {
						opts.MaxDuration = 50 * time.Millisecond // the run waits for it: the length decides nothing
					}
					s := newStore(t, b.b(t), opts)
					req := newReq(t)
					var charges atomic.Int32
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					// No checkpoint: a record with one survives a release anyway.
					// Attempt > 1 says an earlier attempt may have charged: the
					// provider is asked (here: the charge is found) instead.
					charge := func(ctx context.Context, l *Lease) ([]byte, error) {
						if l.Attempt == 1 {
							charges.Add(1)
						}
						return fmt.Appendf(nil, "attempt=%d charges=%d", l.Attempt, charges.Load()), nil
					}
					require.Panics(t, func() {
						_, _ = s.Do(ctx, req, func(fctx context.Context, l *Lease) ([]byte, error) {
							if _, err := charge(fctx, l); err != nil {
								return nil, err
							}
							if cut == "caller's context" {
								cancel()
							}
							<-fctx.Done()
							var result *Response // what a call on the cancelled context returned
							return result.Body, nil
						})
					})
					res, err := s.Do(context.Background(), req, charge)
					require.NoError(t, err)
					require.False(t, res.Replayed)
					require.Equal(t, "attempt=2 charges=1", string(res.Data), "the retry ran as a fresh attempt")
				})
			}
		})
	}
}
