package bench

import (
	"math"
	"slices"
	"time"

	"github.com/idemkey/idemkey/internal/loadgen"
)

// Contender names, in the order the first round measures them.
const (
	Bare  = "bare"  // the Gin handler with no idempotency
	Limit = "limit" // the handler plus exactly two raw EVALSHA round trips
	Ours  = "ours"  // the handler behind ginmw
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

	// StormTwoInstances is ours on two Gin instances sharing one Redis,
	// the duplicates of each key alternating between them.
	StormTwoInstances *StormResult `json:"storm_two_instances,omitempty"`
	Cluster           *Cluster     `json:"cluster,omitempty"`
	Peers             *Peers       `json:"peers,omitempty"`

	Checks   []Check       `json:"checks"`
	Notes    []string      `json:"notes,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// Round is one pass over the contenders, each measured in turn.
type Round struct {
	Order  []string                `json:"order"`
	First  map[string]Load         `json:"first"`
	Replay map[string]Load         `json:"replay,omitempty"`
	Storm  map[string]*StormResult `json:"storm,omitempty"`

	FirstOursLimit       float64 `json:"first_ours_limit"`
	FirstOursBare        float64 `json:"first_ours_bare"`
	FirstLimitBare       float64 `json:"first_limit_bare"`
	ReplayOursLimit      float64 `json:"replay_ours_limit,omitempty"`
	ReplayOursLimitFirst float64 `json:"replay_ours_limit_first,omitempty"`
	ReplayOursBare       float64 `json:"replay_ours_bare,omitempty"`

	// By CPU: the same ratios computed from CPU per request (see cpuRatio),
	// and ours' extra CPU per request over the limit's, in microseconds.
	FirstOursLimitCPU  float64 `json:"first_ours_limit_cpu"`
	FirstExtraCPUUS    float64 `json:"first_extra_cpu_us"`
	ReplayOursLimitCPU float64 `json:"replay_ours_limit_cpu,omitempty"`
	ReplayExtraCPUUS   float64 `json:"replay_extra_cpu_us,omitempty"`
}

// Medians are the medians over the rounds.
type Medians struct {
	FirstRPS             map[string]float64 `json:"first_rps"`
	ReplayRPS            map[string]float64 `json:"replay_rps,omitempty"`
	FirstOursLimit       float64            `json:"first_ours_limit"`
	FirstOursBare        float64            `json:"first_ours_bare"`
	FirstLimitBare       float64            `json:"first_limit_bare"`
	ReplayOursLimit      float64            `json:"replay_ours_limit,omitempty"`
	ReplayOursLimitFirst float64            `json:"replay_ours_limit_first,omitempty"`
	ReplayOursBare       float64            `json:"replay_ours_bare,omitempty"`
	FirstCPUUS           map[string]float64 `json:"first_cpu_us"`
	FirstRedisCPUUS      map[string]float64 `json:"first_redis_cpu_us"`
	ReplayCPUUS          map[string]float64 `json:"replay_cpu_us,omitempty"`
	ReplayRedisCPUUS     map[string]float64 `json:"replay_redis_cpu_us,omitempty"`
	FirstOursLimitCPU    float64            `json:"first_ours_limit_cpu"`
	FirstExtraCPUUS      float64            `json:"first_extra_cpu_us"`
	ReplayOursLimitCPU   float64            `json:"replay_ours_limit_cpu,omitempty"`
	ReplayExtraCPUUS     float64            `json:"replay_extra_cpu_us,omitempty"`
	StormP50MS           map[string]float64 `json:"storm_p50_ms,omitempty"`
	StormP99MS           map[string]float64 `json:"storm_p99_ms,omitempty"`
	StormRPS             map[string]float64 `json:"storm_rps,omitempty"`
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

// StormResult is one retry storm: internal/storm's client-side verdict and
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

	// RoundTrips is commands sent per request, counted by a go-redis hook.
	RoundTrips float64 `json:"round_trips"`
	// EvalSHA, Eval and OtherTopLevel are per request, counted by the
	// server. OtherTopLevel counts commands that no script runs; scripts'
	// own commands are in ScriptCommands.
	EvalSHA       float64 `json:"evalsha"`
	Eval          float64 `json:"eval"`
	OtherTopLevel float64 `json:"other_top_level"`
	// ServerRoundTrips is EvalSHA + Eval + OtherTopLevel.
	ServerRoundTrips float64 `json:"server_round_trips"`
	// ScriptCommands is the commands the scripts ran, per request, and
	// Commands the same by name.
	ScriptCommands float64            `json:"script_commands"`
	Commands       map[string]float64 `json:"commands"`
}

// Memory is the Redis memory of one completed record.
type Memory struct {
	BodyBytes int `json:"body_bytes"`
	// StoredBytes is the length of the record's stored response: the
	// encoded headers (Content-Type, Location) and the body.
	StoredBytes int `json:"stored_bytes"`
	// Usage is MEMORY USAGE <record> SAMPLES 0 (the lease key is gone once
	// the record is completed).
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
