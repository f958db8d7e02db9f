package httpcore

import "errors"

// errExited stands for a handler that neither returned nor panicked
// (runtime.Goexit): its outcome is unknown, so the key is released.
var errExited = errors.New("idemkey: handler exited without returning")

// Run calls handler and then x.Finish, which stores the outcome or, if
// handler panics or exits early (runtime.Goexit), ends the lease without
// one (see Finish). A panic goes on after Finish, so the adapter's
// recovery (or net/http's) sees it; an early exit goes on exiting.
func (x *Exchange) Run(handler func()) {
	returned := false
	defer func() {
		if returned {
			return
		}
		p := recover()
		if p == nil {
			x.Finish(errExited)
			return
		}
		x.Finish(p)
		panic(p)
	}()
	handler()
	returned = true
	x.Finish(nil)
}
