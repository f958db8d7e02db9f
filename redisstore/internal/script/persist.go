package script

import (
	"context"
	"errors"
	"time"
)

// PersistTries bounds Persist's tries when ctx has no deadline.
const PersistTries = 40

// Persist runs write, a write that is safe to repeat, until it reaches
// Redis: tries 10ms apart, doubling to 250ms, while ctx lasts (and at most
// PersistTries tries). Answers from Redis are final (IsFinal, and errors
// matching one of finals); only failures to reach it are tried again. It
// returns write's last error.
func Persist(ctx context.Context, write func() error, finals ...error) error {
	return persist(ctx, sleep, func(err error) bool {
		for _, f := range finals {
			if errors.Is(err, f) {
				return true
			}
		}
		return false
	}, write)
}

// persist is Persist, waiting between tries with wait.
func persist(ctx context.Context, wait func(context.Context, time.Duration) bool, final func(error) bool, write func() error) error {
	backoff := 10 * time.Millisecond
	for try := 1; ; try++ {
		err := write()
		if err == nil || IsFinal(err) || (final != nil && final(err)) || try == PersistTries || !wait(ctx, backoff) {
			return err
		}
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}

// sleep waits d, or returns false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// HandBack gives back, in the background, a claim whose answer was lost
// (Redis may have run it, and nobody will run the operation on it): it
// calls release, within timeout each time, at once and once more a moment
// later in case the claim reached Redis late, until release reports that
// the claim is not held (done). While refusal says Redis refuses
// connections (Outage.Refusal), it waits for it to answer, within the
// same timeout, rather than send releases that cannot reach it.
func HandBack(timeout time.Duration, refusal func() error, release func(context.Context) (done bool)) {
	go func() {
		for _, wait := range [...]time.Duration{0, 100 * time.Millisecond} {
			time.Sleep(wait)
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			for refusal() != nil && sleep(ctx, outageProbe) {
			}
			done := ctx.Err() == nil && release(ctx)
			cancel()
			if done {
				return
			}
		}
	}()
}
