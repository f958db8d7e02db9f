package storm

import (
	"time"

	"github.com/idemkey/idemkey/idemclient"
)

// The retry policy of an arm (Config.RetryPolicies): idemclient's, so
// that the one that held up in the storm is the one a client ships. Load
// mode's simulated clients share one, as the Transports of a process
// would, with its state kept for the target's host.

// retryPolicy returns a fresh RetryPolicy of the arm's name, its waits
// Config.Policy's; nil for the burst mode, or a name it does not know
// (Run has checked it).
func (r *runner) retryPolicy() *idemclient.RetryPolicy {
	name := r.cfg.arm.policy
	if name == "" {
		name = idemclient.RetryBackoff
	}
	waits := r.cfg.Policy
	rp, err := idemclient.NewRetryPolicy(name, idemclient.RetryOptions{Policy: waits})
	if err != nil {
		return nil
	}
	return rp
}

// allow asks the policy whether attempt number n (1 for the first) may be
// sent now, and counts it.
func (l *loader) allow(n int) bool {
	return l.rp == nil || l.rp.Allow(l.target.Host, n, time.Now()) == ""
}

// done tells the policy how an attempt ended: accepted when its answer is
// not worth a retry.
func (l *loader) done(accepted bool) {
	if l.rp != nil {
		l.rp.Done(l.target.Host, accepted, time.Now())
	}
}

// delay is the wait before retry number n (1 for the first).
func (l *loader) delay(n int, retryAfter string, now time.Time) time.Duration {
	if l.rp == nil {
		return l.policy.Delay(n, retryAfter, now)
	}
	return l.rp.Delay(n, retryAfter, now)
}
