package httpcore

import (
	"net/http"
	"strings"
	"time"

	"github.com/idemkey/idemkey/observe"
)

// note is what Begin learns about a request, for the observer. Its methods
// do nothing on a nil note, which is what Begin passes when nobody observes.
type note struct {
	kind       observe.Kind
	problem    string
	status     int
	err        error
	scope, key string
}

func (n *note) keyed(scope, key string) {
	if n != nil {
		n.scope, n.key = scope, key
	}
}

func (n *note) set(kind observe.Kind, problem string, err error) {
	if n != nil {
		n.kind, n.problem, n.err = kind, problem, err
	}
}

func (n *note) setStatus(status int) {
	if n != nil {
		n.status = status
	}
}

// refused notes a problem answer: which decision it reports.
func (n *note) refused(p *problem) {
	if n == nil {
		return
	}
	n.problem, n.status = p.slug, p.status
	switch p {
	case &problemInProgress:
		n.kind = observe.InProgress
	case &problemKeyReused:
		n.kind = observe.Mismatch
	case &problemUnavailable, &problemStoreError:
		n.kind = observe.Unavailable
	default:
		n.kind = observe.Rejected
	}
}

// route names the route of r for the observer: the method and the route's
// pattern as the adapter knows it (Gin's FullPath, the ServeMux pattern),
// else the method and "unmatched". Never the path: the client chooses it,
// and every distinct route is a series in the metrics (or not even valid
// UTF-8: POST /%FF).
func (h *Guard) route(r *http.Request, c any) string {
	if h.o.Route != nil {
		if p := h.o.Route(r, c); p != "" {
			return r.Method + " " + p
		}
	}
	if p := r.Pattern; p != "" {
		// "[METHOD ][HOST]/PATH": a method comes before the first space,
		// and has no slash.
		if m, _, ok := strings.Cut(p, " "); ok && !strings.Contains(m, "/") {
			return p
		}
		return r.Method + " " + p
	}
	return r.Method + " unmatched"
}

// observeBegin reports what Begin decided.
func (h *Guard) observeBegin(r *http.Request, c any, n *note, x *Exchange) {
	if x != nil {
		kind := observe.Claimed
		if x.info.Lease.Attempt > 1 {
			kind = observe.TookOver
			h.o.Logger.Info("idemkey: took over a key whose earlier attempt ended without an outcome",
				"attempt", x.info.Lease.Attempt, "recovery_point", x.info.Lease.RecoveryPoint)
		}
		x.route, x.started, x.info.scope = h.route(r, c), time.Now(), n.scope
		e := observe.NewEvent(kind, n.scope, n.key)
		e.Route, e.Attempt = x.route, x.info.Lease.Attempt
		h.obs.Event(r.Context(), &e)
		return
	}
	if n.kind == 0 {
		return // passed through untouched
	}
	e := observe.NewEvent(n.kind, n.scope, n.key)
	e.Route, e.Problem, e.Status, e.Err = h.route(r, c), n.problem, n.status, n.err
	h.obs.Event(r.Context(), &e)
}

// observeFinish reports how a run ended.
func (h *Guard) observeFinish(x *Exchange, kind observe.Kind, err error) {
	l := x.info.Lease
	e := observe.NewEvent(kind, x.info.scope, x.info.Key)
	e.Route, e.Attempt, e.Status, e.Held, e.Err = x.route, l.Attempt, x.Recorder.status, time.Since(x.started), err
	h.obs.Event(x.Request.Context(), &e)
}
