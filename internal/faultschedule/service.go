package faultschedule

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkey/idemkey/observe"
)

// scope is the one scope of the service's keys (httpmw.SharedScope).
const scope = "schedules"

// hashSecret keys the key hashes the real store's observer reports.
var hashSecret = []byte("faultschedule")

// keyHash is the hash the store's events report for key.
func keyHash(key string) string {
	e := observe.NewEvent(observe.Fenced, scope, key)
	return e.KeyHash(hashSecret)
}

// Plan is the service's behaviour, shared by its instances as a real
// service's would be by its dependencies: the first run of some
// operations answers a transient 500 before doing anything (op%10 == 3),
// the first run of others takes Slow (op%10 == 6), longer than the
// client waits for an attempt. Its methods are safe for concurrent use.
type Plan struct {
	// Slow is how long a slow run takes; 0: none is slow.
	Slow time.Duration

	mu   sync.Mutex
	runs map[string]int
}

type action int

const (
	actNormal action = iota
	actTransient
	actSlow
)

func (p *Plan) next(key string, op int) action {
	if p == nil {
		return actNormal
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runs == nil {
		p.runs = map[string]int{}
	}
	p.runs[key]++
	if p.runs[key] > 1 {
		return actNormal
	}
	switch {
	case op%10 == 3:
		return actTransient
	case op%10 == 6 && p.Slow > 0:
		return actSlow
	}
	return actNormal
}

// gate freezes an instance: frozen, its handlers and new requests wait;
// dead (killed), they never go on.
type gate struct {
	mu     sync.Mutex
	frozen bool
	dead   bool
	open   chan struct{} // closed when not frozen
}

func newGate() *gate {
	g := &gate{open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *gate) freeze() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.frozen {
		g.frozen = true
		g.open = make(chan struct{})
	}
}

func (g *gate) thaw() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.frozen && !g.dead {
		g.frozen = false
		close(g.open)
	}
}

// kill freezes the gate for good; release lets the waiters out (to die
// quietly) when the run is over.
func (g *gate) kill() {
	g.freeze()
	g.mu.Lock()
	g.dead = true
	g.mu.Unlock()
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.frozen {
		g.frozen = false
		close(g.open)
	}
}

// pass waits while the gate is frozen and then calls onPass (if not nil)
// before anyone can freeze it again; it reports false when the instance
// was killed: the caller must do nothing more.
func (g *gate) pass(onPass func()) bool {
	for {
		g.mu.Lock()
		open, frozen, dead := g.open, g.frozen, g.dead
		if !frozen && !dead && onPass != nil {
			onPass()
		}
		g.mu.Unlock()
		if dead {
			return false
		}
		if !frozen {
			return true
		}
		<-open
	}
}

// Service is one instance of the test service: a charge endpoint whose
// side effect is a line of the Ledger. Its body is {"op": N}; its answer
// 201 {"op", "key", "execution", "token"}, the execution id making every
// run's answer different, so that a replay shows which run it replays.
type Service struct {
	name   string
	ledger *Ledger
	plan   *Plan
	gate   *gate

	seq       atomic.Int64
	inFlight  atomic.Int64
	sleeping  atomic.Int64 // slow runs in their sleep, before their effect
	effecting atomic.Int64 // requests past the gate whose answer is not done

	mu      sync.Mutex
	pending map[refKey][]pendingRun // runs by key hash and token, for their refusal
	errs    []string                // the first errors behind outcomes not stored
}

type refKey struct {
	hash  string
	token int
}

type pendingRun struct{ key, id string }

func newService(name string, ledger *Ledger, plan *Plan) *Service {
	return &Service{name: name, ledger: ledger, plan: plan, gate: newGate(), pending: map[refKey][]pendingRun{}}
}

// runInfo tells the handler the key and the fencing token its run holds.
type runInfo func(ctx context.Context) (key string, token int)

// handler returns the service's handler, to be wrapped by a guard that
// gives it the run's key and token through info.
func (s *Service) handler(info runInfo) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		start := time.Now()
		key, token := info(r.Context())
		var req struct {
			Op int `json:"op"`
		}
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &req)
		switch s.plan.next(key, req.Op) {
		case actTransient:
			http.Error(w, "transient", http.StatusInternalServerError)
			return
		case actSlow:
			s.sleeping.Add(1)
			time.Sleep(s.plan.Slow) // deliberately deaf to the client giving up
			s.sleeping.Add(-1)
		}
		if !s.gate.pass(func() { s.markEffecting(r.Context()) }) {
			panic(http.ErrAbortHandler) // killed: this run never made its effect
		}
		id := s.name + "-" + strconv.FormatInt(s.seq.Add(1), 10)
		run := pendingRun{key, id}
		if st := stateOf(r.Context()); st != nil {
			st.id.Store(&run)
		}
		s.mu.Lock()
		rk := refKey{keyHash(key), token}
		s.pending[rk] = append(s.pending[rk], run)
		s.mu.Unlock()
		s.ledger.Effect(key, id, token, start, time.Now())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"op":%d,"key":%q,"execution":%q,"token":%d}`, req.Op, key, id, token)
	})
}

// refused records the refusal of the completion of the run the request
// of ctx made (else of this instance's runs of the key, by hash, under
// token).
func (s *Service) refused(ctx context.Context, hash string, token int) {
	for _, p := range s.runOf(ctx, hash, token) {
		s.ledger.Refused(p.key, p.id)
	}
}

// notStored records that the outcome of the run the request of ctx made
// (else of this instance's runs of the key under token) could not be
// stored.
func (s *Service) notStored(ctx context.Context, hash string, token int) {
	for _, p := range s.runOf(ctx, hash, token) {
		s.ledger.NotStored(p.key, p.id)
	}
}

// sample keeps the first few errors behind outcomes not stored, for the
// run's log.
func (s *Service) sample(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) < 3 && err != nil {
		s.errs = append(s.errs, err.Error())
	}
}

func (s *Service) take(hash string, token int) []pendingRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	runs := s.pending[refKey{hash, token}]
	delete(s.pending, refKey{hash, token})
	return runs
}

// front holds new requests while the instance is frozen, as a stopped
// process would, and drops them once it is killed.
func (s *Service) front(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.gate.pass(nil) {
			panic(http.ErrAbortHandler)
		}
		st := new(reqState)
		defer func() {
			if st.effecting.Load() {
				s.effecting.Add(-1)
			}
		}()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), reqStateKey{}, st)))
	})
}

// reqState is what the service knows of one request, in its context:
// whether it passed the gate, and the id of the run it made, so that the
// store's verdict on that run (seen by the observer, with the request's
// context) lands on the right ledger line.
type reqState struct {
	effecting atomic.Bool
	id        atomic.Pointer[pendingRun]
}

type reqStateKey struct{}

func stateOf(ctx context.Context) *reqState {
	st, _ := ctx.Value(reqStateKey{}).(*reqState)
	return st
}

// markEffecting counts the request as past the gate, until its answer
// (the completion included) is done.
func (s *Service) markEffecting(ctx context.Context) {
	if st := stateOf(ctx); st != nil && !st.effecting.Load() {
		st.effecting.Store(true)
		s.effecting.Add(1)
	}
}

// runOf returns the run the request made, if the context knows it, and
// forgets it from the runs pending by key hash and token.
func (s *Service) runOf(ctx context.Context, hash string, token int) []pendingRun {
	st := stateOf(ctx)
	if st == nil || st.id.Load() == nil {
		return s.take(hash, token)
	}
	p := *st.id.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	rk := refKey{hash, token}
	runs := s.pending[rk]
	for i := range runs {
		if runs[i].id == p.id {
			s.pending[rk] = append(runs[:i:i], runs[i+1:]...)
			break
		}
	}
	return []pendingRun{p}
}

// settle waits (a bounded poll) until no request is between the gate and
// the end of its answer: a frozen instance then holds every run before
// its effect.
func (s *Service) settle(within time.Duration) {
	deadline := time.Now().Add(within)
	for s.effecting.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}
