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
	PhaseReplay  = "replay"  // replay throughput, limit and ours
	PhaseStorm   = "storm"   // retry storm per contender per round, then ours on two instances
	PhaseCost    = "cost"    // Redis round trips and commands per request
	PhaseMemory  = "memory"  // Redis memory per stored record
	PhaseCluster = "cluster" // the storm against a 3-master cluster
	PhasePeers   = "peers"   // go -C bench run ./cmd/peers -json
)

// AllPhases lists every phase, in the order a run makes them.
var AllPhases = []string{PhaseFirst, PhaseReplay, PhaseStorm, PhaseCost, PhaseMemory, PhaseCluster, PhasePeers}

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
	// Masters is the size of the cluster of the cluster phase.
	Masters int `json:"masters"`
	// Phases selects what to measure; nil means AllPhases.
	Phases []string `json:"phases"`
	// ModuleDir is the bench module's directory, where the peers phase runs
	// cmd/peers; "" finds it with FindModule.
	ModuleDir string `json:"-"`
	// Command is recorded in the results as the command that made them.
	Command string `json:"-"`
	// Log receives progress lines; nil discards them.
	Log io.Writer `json:"-"`
}

// DefaultConfig is the full run: about two and a half minutes.
func DefaultConfig() Config {
	return Config{
		Rounds: 5, Duration: 1500 * time.Millisecond, Concurrency: 64, ReplayKeys: 1000,
		StormKeys: 2000, StormDups: 10, StormConcurrency: 128, CostRequests: 500, Masters: 3,
	}
}

// QuickConfig is a smoke run for CI: a few hundred milliseconds per phase,
// a smaller storm, no peers.
func QuickConfig() Config {
	return Config{
		Rounds: 1, Duration: 300 * time.Millisecond, Concurrency: 32, ReplayKeys: 200,
		StormKeys: 300, StormDups: 10, StormConcurrency: 64, CostRequests: 50, Masters: 3,
		Phases: []string{PhaseFirst, PhaseReplay, PhaseStorm, PhaseCost, PhaseMemory, PhaseCluster},
	}
}

func (c *Config) has(phase string) bool {
	return c.Phases == nil || slices.Contains(c.Phases, phase)
}

func (c *Config) validate() error {
	switch {
	case c.Rounds < 1:
		return errors.New("rounds must be at least 1")
	case c.Duration <= 0:
		return errors.New("duration must be positive")
	case c.Concurrency < 1 || c.StormConcurrency < 1:
		return errors.New("concurrency and storm concurrency must be at least 1")
	case c.ReplayKeys < 1 || c.StormKeys < 1 || c.StormDups < 1 || c.CostRequests < 1:
		return errors.New("replay keys, storm keys, storm dups and cost requests must be at least 1")
	case c.Masters < 1:
		return errors.New("masters must be at least 1")
	}
	for _, p := range c.Phases {
		if !slices.Contains(AllPhases, p) {
			return fmt.Errorf("unknown phase %q (phases: %s)", p, strings.Join(AllPhases, ","))
		}
	}
	return nil
}
