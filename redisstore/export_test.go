package redisstore

// Test-only helpers on the package's internals.

// keepAlive runs the lease's heartbeat alone, as Supervise does but with
// neither a context to cancel nor MaxDuration: onLost, if not nil, is
// called once, from the beat's goroutine, when the lease is lost
// (ErrLeaseLost from Redis, or no beat through before the lease ran out),
// and the heartbeat stops. stop ends it.
func (l *Lease) keepAlive(onLost func()) (stop func()) { return l.supervise(nil, onLost, 0).Stop }

// FlightWaiting returns how many callers wait for the claim of req's key
// in s's in-process collapse, for the external tests.
func FlightWaiting(s *Store, req Request) int {
	return s.flights.Waiting(s.keys(req.Scope, req.Key).Record())
}
