package bench

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Phase names, for Config.Phases.
const (
	PhaseFirst   = "first"   // first-execution throughput, all contenders
	PhaseReplay  = "replay"  // replay throughput, every contender but bare
	PhaseStorm   = "storm"   // retry storm per contender per round, then ours' variants on two instances
	PhaseCost    = "cost"    // Redis round trips and commands per request
	PhaseAllocs  = "allocs"  // Go allocations per request, through httptest
	PhaseMemory  = "memory"  // Redis memory per stored record
	PhaseCluster = "cluster" // the storm of ours' variants against a 3-master cluster
	PhasePeers   = "peers"   // go -C bench run ./cmd/peers -json
)

// AllPhases lists every phase, in the order a run makes them.
var AllPhases = []string{PhaseFirst, PhaseReplay, PhaseStorm, PhaseCost, PhaseAllocs, PhaseMemory, PhaseCluster, PhasePeers}

// Config is one run of the scenario runner.
type Config struct {
	// Rounds is how many times the contenders are measured in turn.
	Rounds int `json:"rounds"`
	// Duration is the length of each throughput measurement.
	Duration time.Duration `json:"duration_ns"`
	// Concurrency is the keep-alive clients of the throughput measurements.
	Concurrency int `json:"concurrency"`
	// ReplayKeys are stored first, then cycled over by the replay phase.
	ReplayKeys int `json:"replay_keys"`
	// StormKeys x StormDups requests, StormConcurrency at a time.
	StormKeys        int `json:"storm_keys"`
	StormDups        int `json:"storm_dups"`
	StormConcurrency int `json:"storm_concurrency"`
	// CostRequests is the requests sent, one at a time, per cost case.
	CostRequests int `json:"cost_requests"`
	// AllocRuns is the requests served per case of the allocs phase.
	AllocRuns int `json:"alloc_runs"`
	// Masters is the size of the cluster of the cluster phase.
	Masters int `json:"masters"`
	// Phases selects what to measure; nil means AllPhases.
	Phases []string `json:"phases"`
	// Contenders selects whom to measure, in the first round's order; nil
	// means ContenderNames(). Ours is always measured.
	Contenders []string `json:"contenders"`
	// ModuleDir is the bench module's directory, where the peers phase runs
	// cmd/peers; "" finds it with FindModule.
	ModuleDir string `json:"-"`
	// Command is recorded in the results as the command that made them.
	Command string `json:"-"`
	// Log receives progress lines; nil discards them.
	Log io.Writer `json:"-"`
}

// DefaultConfig is the full run: about four minutes.
func DefaultConfig() Config {
	return Config{
		Rounds: 5, Duration: 1500 * time.Millisecond, Concurrency: 64, ReplayKeys: 1000,
		StormKeys: 2000, StormDups: 10, StormConcurrency: 128, CostRequests: 500, AllocRuns: 2000, Masters: 3,
	}
}

// QuickConfig is a smoke run for CI: a few hundred milliseconds per phase,
// a smaller storm, no peers.
func QuickConfig() Config {
	return Config{
		Rounds: 1, Duration: 300 * time.Millisecond, Concurrency: 32, ReplayKeys: 200,
		StormKeys: 300, StormDups: 10, StormConcurrency: 64, CostRequests: 50, AllocRuns: 100, Masters: 3,
		Phases: []string{PhaseFirst, PhaseReplay, PhaseStorm, PhaseCost, PhaseAllocs, PhaseMemory, PhaseCluster},
	}
}

func (c *Config) has(phase string) bool {
	return c.Phases == nil || slices.Contains(c.Phases, phase)
}

// contenders returns the names of the contenders to measure.
func (c *Config) contenders() []string {
	if c.Contenders == nil {
		return ContenderNames()
	}
	return c.Contenders
}

func (c *Config) validate() error {
	switch {
	case c.Rounds < 1:
		return errors.New("rounds must be at least 1")
	case c.Duration <= 0:
		return errors.New("duration must be positive")
	case c.Concurrency < 1 || c.StormConcurrency < 1:
		return errors.New("concurrency and storm concurrency must be at least 1")
	case c.ReplayKeys < 1 || c.StormKeys < 1 || c.StormDups < 1 || c.CostRequests < 1 || c.AllocRuns < 1:
		return errors.New("replay keys, storm keys, storm dups, cost requests and alloc runs must be at least 1")
	case c.Masters < 1:
		return errors.New("masters must be at least 1")
	}
	for _, p := range c.Phases {
		if !slices.Contains(AllPhases, p) {
			return fmt.Errorf("unknown phase %q (phases: %s)", p, strings.Join(AllPhases, ","))
		}
	}
	names := c.contenders()
	for i, n := range names {
		if _, ok := specOf(n); !ok {
			return fmt.Errorf("unknown contender %q (contenders: %s)", n, strings.Join(ContenderNames(), ","))
		}
		if slices.Contains(names[:i], n) {
			return fmt.Errorf("contender %q named twice", n)
		}
	}
	if !slices.Contains(names, Ours) {
		return fmt.Errorf("the contenders must include %q", Ours)
	}
	return nil
}
