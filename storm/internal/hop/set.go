package hop

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Set is the hops of a run, opened together from the command line's
// --proxy, --tcp-proxy and --fault values.
type Set struct {
	hops []*Hop
}

// Open starts a hop for each spec, with the faults that name it: it checks
// everything first (names unique, every fault naming a hop, windows valid
// for their hop's kind and not overlapping) and then listens; if any hop
// cannot start, those already started are closed and the error says which
// failed. The hops forward without faults until Begin.
func Open(specs []Spec, faults []Fault, o Options) (*Set, error) {
	byName := map[string][]Window{}
	for _, s := range specs {
		if err := checkName(s.Name); err != nil {
			return nil, err
		}
		if _, dup := byName[s.Name]; dup {
			return nil, fmt.Errorf("two hops are named %s: give each --proxy and --tcp-proxy a name of its own", s.Name)
		}
		byName[s.Name] = nil
	}
	for _, f := range faults {
		ws, ok := byName[f.Hop]
		if !ok {
			return nil, fmt.Errorf("--fault %q: no --proxy or --tcp-proxy is named %s", f.String(), f.Hop)
		}
		byName[f.Hop] = append(ws, f.Window)
	}
	// Check every hop's windows before listening on anything.
	for _, s := range specs {
		for i, w := range byName[s.Name] {
			if err := w.check(s.Kind); err != nil {
				return nil, fmt.Errorf("--fault %q: %v", Fault{Hop: s.Name, Window: w}.String(), err)
			}
			for _, other := range byName[s.Name][:i] {
				if w.At < other.End() && other.At < w.End() {
					return nil, fmt.Errorf("--fault %q and %q overlap: give one window all the effects of a time",
						Fault{Hop: s.Name, Window: other}.String(), Fault{Hop: s.Name, Window: w}.String())
				}
			}
		}
	}
	set := &Set{}
	for _, s := range specs {
		h, err := Listen(s, byName[s.Name], o)
		if err != nil {
			_ = set.Close()
			return nil, err
		}
		set.hops = append(set.hops, h)
	}
	return set, nil
}

// Hops returns the hops, in the order of their specs.
func (s *Set) Hops() []*Hop { return slices.Clone(s.hops) }

// Hop returns the hop named name, or nil.
func (s *Set) Hop(name string) *Hop {
	for _, h := range s.hops {
		if h.spec.Name == name {
			return h
		}
	}
	return nil
}

// Begin starts a run of every hop's schedule at start (see Hop.Begin).
func (s *Set) Begin(start time.Time) {
	for _, h := range s.hops {
		h.Begin(start)
	}
}

// Records returns what every window of every hop did in the current run,
// ordered by when the window opened (then by hop, in spec order).
func (s *Set) Records() []Record {
	var out []Record
	for _, h := range s.hops {
		out = append(out, h.Records()...)
	}
	slices.SortStableFunc(out, func(a, b Record) int { return cmp.Compare(a.Window.At, b.Window.At) })
	return out
}

// Close closes every hop (see Hop.Close) and returns the first error.
func (s *Set) Close() error {
	var first error
	for _, h := range s.hops {
		if err := h.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
