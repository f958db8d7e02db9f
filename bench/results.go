package bench

import (
	"math"
	"slices"
	"time"

	"github.com/idemkey/idemkey/internal/loadgen"
)

// Results is everything one run measured. Its JSON form is what -json
// writes; RESULTS.md is rendered from it.
type Results struct {
	Env    Env    `json:"env"`
	Config Config `json:"config"`

	Rounds []Round `json:"rounds,omitempty"`
	// Medians of the per-round figures; ratios are medians of the per-round
	// ratios, not ratios of medians.
	Median Medians `json:"median"`

	Cost   []Cost   `json:"cost,omitempty"`
	Memory []Memory `json:"memory,omitempty"`
	// Allocs is Go allocations per request, by contender and case.
	Allocs []Allocs `json:"allocs,omitempty"`

	// StormTwoInstances is each of our variants on two Gin instances sharing
	// one Redis, the duplicates of each key alternating between them.
	StormTwoInstances []*StormResult `json:"storm_two_instances,omitempty"`
	Cluster           []*Cluster     `json:"cluster,omitempty"`
	Peers             *Peers         `json:"peers,omitempty"`

	Checks []Check `json:"checks"`
	// Targets are the goals of open issues (12, 17): reported, they do not
	// fail the run.
	Targets  []Check       `json:"targets,omitempty"`
	Notes    []string      `json:"notes,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// Round is one pass over the contenders, each measured in turn.
type Round struct {
	Order  []string                `json:"order"`
	First  map[string]Load         `json:"first,omitempty"`
	Replay map[string]Load         `json:"replay,omitempty"`
	Storm  map[string]*StormResult `json:"storm,omitempty"`

	// Ratios are the throughput ratios this round measured, by name (see
	// ratioDefs); CPURatios the same ratios computed from CPU per request
	// (see cpuRatio), for the first and replay phases.
	Ratios    map[string]float64 `json:"ratios"`
	CPURatios map[string]float64 `json:"cpu_ratios"`
}

// Medians are the medians over the rounds, each field on its own.
type Medians struct {
	First     map[string]Load        `json:"first,omitempty"`
	Replay    map[string]Load        `json:"replay,omitempty"`
	Storm     map[string]StormMedian `json:"storm,omitempty"`
	Ratios    map[string]float64     `json:"ratios,omitempty"`
	CPURatios map[string]float64     `json:"cpu_ratios,omitempty"`
}

// StormMedian is the median of a contender's storms over the rounds.
type StormMedian struct {
	RPS   float64 `json:"rps"`
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
	// RoundTripsPerKey are the calls the contender's client made (a
	// pipeline of many commands is one), and CommandsPerKey every command
	// redis-server ran (EVALSHA and the commands inside the scripts), per
	// storm key.
	RoundTripsPerKey float64 `json:"round_trips_per_key"`
	CommandsPerKey   float64 `json:"commands_per_key"`
	// ScriptsPerKey are the top-level commands redis-server ran per storm
	// key (EVALSHA, EVAL and others the clients sent): the requests Redis
	// served, whether or not they came batched in a pipeline.
	ScriptsPerKey float64 `json:"scripts_per_key"`
}

// Load is one closed-loop throughput measurement.
type Load struct {
	RPS      float64 `json:"rps"`
	P50MS    float64 `json:"p50_ms"`
	P99MS    float64 `json:"p99_ms"`
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	// CPUUS is the CPU time of the runner process (servers and load
	// generator) per request, in microseconds; RedisCPUUS that of
	// redis-server. Unlike req/s, they hardly move when other work competes
	// for the machine.
	CPUUS      float64 `json:"cpu_us"`
	RedisCPUUS float64 `json:"redis_cpu_us"`
}

func loadOf(r *loadgen.Result, cpu, redisCPU time.Duration) Load {
	l := Load{RPS: round1(r.RPS), P50MS: ms(r.P50), P99MS: ms(r.P99), Requests: r.Requests, Errors: r.Errors}
	if r.Requests > 0 {
		l.CPUUS = round1(float64(cpu) / float64(time.Microsecond) / float64(r.Requests))
		l.RedisCPUUS = round1(float64(redisCPU) / float64(time.Microsecond) / float64(r.Requests))
	}
	return l
}

// cpuRatio is b's CPU per request over a's, process and redis-server
// together: the throughput ratio a/b that a CPU-bound machine with nothing
// else running would show.
func cpuRatio(a, b Load) float64 {
	return ratio(b.CPUUS+b.RedisCPUUS, a.CPUUS+a.RedisCPUUS)
}

// StormResult is one retry storm: storm's client-side verdict and
// the handler-side execution counts, which are the ground truth.
type StormResult struct {
	Contender   string `json:"contender"`
	Instances   int    `json:"instances"`
	Masters     int    `json:"redis_masters"`
	Keys        int    `json:"keys"`
	Dups        int    `json:"dups"`
	Concurrency int    `json:"concurrency"`
	Requests    int    `json:"requests"`

	Verdict       string `json:"verdict"`
	KeysFailed    int    `json:"keys_failed"`
	DivergentKeys int    `json:"divergent_keys"`

	HandlerExecutions        int `json:"handler_executions"`
	KeysExecuted             int `json:"keys_executed"`
	ExecutionsMax            int `json:"executions_max"`
	KeysExecutedMoreThanOnce int `json:"keys_executed_more_than_once"`

	Originals  int         `json:"originals"`
	Replays    int         `json:"replays"`
	InProgress int         `json:"in_progress"`
	Errors     int         `json:"errors"`
	Status     map[int]int `json:"status_counts"`

	RPS   float64 `json:"rps"`
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`

	// RoundTripsPerKey are the calls the contenders' clients made per key
	// (a pipeline is one); Server is what redis-server (every master, on a
	// cluster) ran per key.
	RoundTripsPerKey float64  `json:"round_trips_per_key"`
	Server           Commands `json:"server"`
}

// ExactlyOnce reports whether every key ran exactly once and every client
// got the same final answer for it.
func (s *StormResult) ExactlyOnce() bool {
	return s != nil && s.Verdict == "pass" && s.HandlerExecutions == s.Keys && s.ExecutionsMax == 1 && s.Errors == 0
}

// Cost is what Redis did per request of one kind, counted by the client
// (commands sent) and by the server (INFO commandstats deltas after CONFIG
// RESETSTAT).
type Cost struct {
	Case      string `json:"case"`
	Contender string `json:"contender"`
	Requests  int    `json:"requests"`
	// Status counts the HTTP answers (0 for store-level cases).
	Status map[int]int `json:"status,omitempty"`

	// RoundTrips is calls made per request, counted by a go-redis hook on
	// the contender's client: a command, or a pipeline of them, is one.
	RoundTrips float64 `json:"round_trips"`
	// Sent is commands sent per request, counted by the same hook.
	Sent float64 `json:"sent"`
	// Server is what redis-server ran per request.
	Server Commands `json:"server"`
}

// Commands is what redis-server ran, per request or per storm key, from INFO
// commandstats deltas after CONFIG RESETSTAT.
type Commands struct {
	// EvalSHA, Eval and Other are top-level commands, what clients sent.
	// Other leaves out the runner's own INFO and CONFIG.
	EvalSHA float64 `json:"evalsha"`
	Eval    float64 `json:"eval"`
	Other   float64 `json:"other"`
	// Script is the commands the scripts ran.
	Script float64 `json:"script"`
	// Total is every command: top-level and inside scripts, the count of
	// commands per first execution ("2 EVALSHA + 9").
	Total float64 `json:"total"`
	// ByName is every command but EVALSHA, EVAL and the runner's own, by
	// name.
	ByName map[string]float64 `json:"by_name"`
}

// TopLevel is EvalSHA + Eval + Other: with no pipelining, round trips as
// the server counts them.
func (c Commands) TopLevel() float64 { return round3(c.EvalSHA + c.Eval + c.Other) }

// Allocs is Go allocations per request of one contender and case, served
// through httptest (no network) by the handler on the run's redis-server, as
// BenchmarkGin does with -benchmem. They count the whole request: Gin, the
// handler, go-redis, and ours in front of them.
type Allocs struct {
	Contender string  `json:"contender"`
	Case      string  `json:"case"`
	Runs      int     `json:"runs"`
	PerOp     float64 `json:"allocs_per_op"`
	BytesOp   float64 `json:"bytes_per_op"`
}

// Memory is the Redis memory of one completed record.
type Memory struct {
	BodyBytes int `json:"body_bytes"`
	// StoredBytes is the length of the record's stored response: the
	// encoded headers (Content-Type, Location) and the body.
	StoredBytes int `json:"stored_bytes"`
	// Usage is MEMORY USAGE <record> SAMPLES 0: the record is one string.
	Usage int `json:"usage"`
	// Overhead is Usage - BodyBytes.
	Overhead int `json:"overhead"`
	// Slack is what the allocator adds to the stored response's own
	// allocation (jemalloc size class minus the bytes asked for).
	Slack int `json:"allocator_slack"`
	// Fixed is Overhead - Slack: what a record costs besides its body and
	// the allocator's rounding of it.
	Fixed    int    `json:"fixed"`
	Encoding string `json:"encoding"`
}

// Cluster is the storm against a Redis Cluster, with no change of code.
type Cluster struct {
	Masters int          `json:"masters"`
	Storm   *StormResult `json:"storm"`
	// RecordsPerMaster is DBSIZE of each master after the storm.
	RecordsPerMaster []int64 `json:"records_per_master"`
}

// Check is one of the claims the harness must show.
type Check struct {
	Name string `json:"name"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Pass bool   `json:"pass"`
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return round3(a / b)
}

func round1(f float64) float64 { return math.Round(f*10) / 10 }
func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// ms converts d to milliseconds rounded to the microsecond.
func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}
