package peers

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// Results is everything a run measured. Its JSON form is what
// `go -C bench run ./cmd/peers -json` prints and what the storm-bench runner
// reads back: this type is the one definition of that exchange, and its JSON
// field names are stable.
type Results struct {
	// Library is the import path of the middleware measured.
	Library string `json:"library"`
	// FiberVersion, StorageModule and StorageVersion say what was built.
	FiberVersion   string `json:"fiber_version"`
	StorageModule  string `json:"storage_module"`
	StorageVersion string `json:"storage_version"`
	GoVersion      string `json:"go_version"`
	RedisVersion   string `json:"redis_version"`
	GOMAXPROCS     int    `json:"gomaxprocs"`
	NumCPU         int    `json:"num_cpu"`

	Config Config `json:"config"`

	// Rounds are the alternating bare / idempotent measurements; the
	// medians below are over them.
	Rounds                   []Round `json:"rounds"`
	FirstRPSBareMedian       float64 `json:"first_rps_bare_median"`
	FirstRPSIdemMedian       float64 `json:"first_rps_idem_median"`
	FirstOverheadRatioMedian float64 `json:"first_overhead_ratio_median"`
	ReplayRPS                float64 `json:"replay_rps"`
	// ReplayExecutions counts handler executions during the replay
	// measurements; 0 means every replay request was served from storage.
	ReplayExecutions int64 `json:"replay_executions"`
	// LoadErrors counts failed requests (transport errors or unexpected
	// statuses) over all throughput measurements; 0 expected.
	LoadErrors int `json:"load_errors"`

	// Storm is the retry storm against one app; StormTwoInstances against
	// two apps sharing one Redis (nil when Options.TwoInstances is false).
	Storm             *Storm `json:"storm"`
	StormTwoInstances *Storm `json:"storm_two_instances,omitempty"`

	// Notes are the facts about the middleware that qualify the figures.
	Notes []string `json:"notes"`
}

// Config records the options a run was made with.
type Config struct {
	Rounds           int     `json:"rounds"`
	DurationS        float64 `json:"duration_s"`
	Concurrency      int     `json:"concurrency"`
	ReplayKeys       int     `json:"replay_keys"`
	Keys             int     `json:"keys"`
	Dups             int     `json:"dups"`
	StormConcurrency int     `json:"storm_concurrency"`
}

// Round is one alternating measurement of the bare and the idempotent app.
type Round struct {
	FirstRPSBare   float64 `json:"first_rps_bare"`
	FirstRPSIdem   float64 `json:"first_rps_idem"`
	Ratio          float64 `json:"ratio"`
	FirstP50MSBare float64 `json:"first_p50_ms_bare"`
	FirstP99MSBare float64 `json:"first_p99_ms_bare"`
	FirstP50MSIdem float64 `json:"first_p50_ms_idem"`
	FirstP99MSIdem float64 `json:"first_p99_ms_idem"`
	ReplayRPS      float64 `json:"replay_rps"`
	ReplayP50MS    float64 `json:"replay_p50_ms"`
	ReplayP99MS    float64 `json:"replay_p99_ms"`
	BareFirst      bool    `json:"bare_measured_first"`
}

// Storm is the outcome of one retry storm.
type Storm struct {
	Instances   int `json:"instances"`
	Keys        int `json:"keys"`
	Dups        int `json:"dups"`
	Concurrency int `json:"concurrency"`
	Requests    int `json:"requests"`
	// Handler-side figures: the ground truth about side effects.
	HandlerExecutions        int `json:"handler_executions"`
	KeysExecuted             int `json:"keys_executed"`
	ExecutionsMax            int `json:"executions_max"`
	KeysExecutedMoreThanOnce int `json:"keys_executed_more_than_once"`
	// Client-side figures from storm.
	DivergentKeys int            `json:"divergent_keys"`
	KeysFailed    int            `json:"keys_failed"`
	Verdict       string         `json:"verdict"`
	Originals     int            `json:"originals"`
	Replays       int            `json:"replays"`
	InProgress    int            `json:"in_progress"`
	Errors        int            `json:"errors"`
	StatusCounts  map[string]int `json:"status_counts"`
	RPS           float64        `json:"rps"`
	P50MS         float64        `json:"p50_ms"`
	P99MS         float64        `json:"p99_ms"`
	ElapsedMS     float64        `json:"elapsed_ms"`
}

// WriteText writes the human-readable summary.
func (r *Results) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "peers: %s\n", r.Library)
	fmt.Fprintf(&b, "  fiber %s, storage %s %s, %s, redis %s, GOMAXPROCS %d\n",
		r.FiberVersion, r.StorageModule, r.StorageVersion, r.GoVersion, r.RedisVersion, r.GOMAXPROCS)
	fmt.Fprintf(&b, "  %d rounds x %gs, concurrency %d, %d replay keys\n\n",
		r.Config.Rounds, r.Config.DurationS, r.Config.Concurrency, r.Config.ReplayKeys)
	fmt.Fprintf(&b, "%-7s %14s %14s %7s %14s   %s\n", "round", "bare req/s", "idem req/s", "ratio", "replay req/s", "p50/p99 ms (bare | idem | replay)")
	for i, rd := range r.Rounds {
		fmt.Fprintf(&b, "%-7d %14.1f %14.1f %7.3f %14.1f   %.2f/%.2f | %.2f/%.2f | %.2f/%.2f\n",
			i+1, rd.FirstRPSBare, rd.FirstRPSIdem, rd.Ratio, rd.ReplayRPS,
			rd.FirstP50MSBare, rd.FirstP99MSBare, rd.FirstP50MSIdem, rd.FirstP99MSIdem, rd.ReplayP50MS, rd.ReplayP99MS)
	}
	fmt.Fprintf(&b, "%-7s %14.1f %14.1f %7.3f %14.1f\n\n", "median",
		r.FirstRPSBareMedian, r.FirstRPSIdemMedian, r.FirstOverheadRatioMedian, r.ReplayRPS)
	fmt.Fprintf(&b, "replay executions %d, load errors %d\n", r.ReplayExecutions, r.LoadErrors)
	for _, s := range []*Storm{r.Storm, r.StormTwoInstances} {
		if s == nil {
			continue
		}
		fmt.Fprintf(&b, "\nstorm, %d instance(s): %d keys x %d dups, concurrency %d\n", s.Instances, s.Keys, s.Dups, s.Concurrency)
		fmt.Fprintf(&b, "  handler executions %d over %d keys, max %d per key, %d keys executed more than once\n",
			s.HandlerExecutions, s.KeysExecuted, s.ExecutionsMax, s.KeysExecutedMoreThanOnce)
		fmt.Fprintf(&b, "  divergent keys %d, storm verdict %s (%d keys failed)\n", s.DivergentKeys, s.Verdict, s.KeysFailed)
		codes := slices.Sorted(maps.Keys(s.StatusCounts))
		var parts []string
		for _, c := range codes {
			parts = append(parts, fmt.Sprintf("%s: %d", c, s.StatusCounts[c]))
		}
		fmt.Fprintf(&b, "  statuses %s; originals %d, replays %d, 409 in progress %d, errors %d\n",
			strings.Join(parts, " "), s.Originals, s.Replays, s.InProgress, s.Errors)
		fmt.Fprintf(&b, "  %.1f req/s, p50 %.2f ms, p99 %.2f ms, elapsed %.0f ms\n", s.RPS, s.P50MS, s.P99MS, s.ElapsedMS)
	}
	b.WriteString("\nnotes:\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  - %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
