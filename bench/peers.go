package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Peers is what bench/peers measured of another idempotency library, on its
// own framework, in the same run (its -json output; see
// bench/peers/README.md for the field meanings).
type Peers struct {
	Command string `json:"command"`

	Library        string `json:"library"`
	FiberVersion   string `json:"fiber_version"`
	StorageModule  string `json:"storage_module"`
	StorageVersion string `json:"storage_version"`

	FirstRPSBareMedian       float64 `json:"first_rps_bare_median"`
	FirstRPSIdemMedian       float64 `json:"first_rps_idem_median"`
	FirstOverheadRatioMedian float64 `json:"first_overhead_ratio_median"`
	ReplayRPS                float64 `json:"replay_rps"`
	ReplayExecutions         int64   `json:"replay_executions"`
	LoadErrors               int     `json:"load_errors"`

	Storm             *PeerStorm `json:"storm"`
	StormTwoInstances *PeerStorm `json:"storm_two_instances"`

	Notes []string `json:"notes"`
}

// PeerStorm is one storm of bench/peers.
type PeerStorm struct {
	Instances                int     `json:"instances"`
	Keys                     int     `json:"keys"`
	Dups                     int     `json:"dups"`
	Concurrency              int     `json:"concurrency"`
	Requests                 int     `json:"requests"`
	HandlerExecutions        int     `json:"handler_executions"`
	KeysExecuted             int     `json:"keys_executed"`
	ExecutionsMax            int     `json:"executions_max"`
	KeysExecutedMoreThanOnce int     `json:"keys_executed_more_than_once"`
	DivergentKeys            int     `json:"divergent_keys"`
	KeysFailed               int     `json:"keys_failed"`
	Verdict                  string  `json:"verdict"`
	InProgress               int     `json:"in_progress"`
	Errors                   int     `json:"errors"`
	RPS                      float64 `json:"rps"`
	P50MS                    float64 `json:"p50_ms"`
	P99MS                    float64 `json:"p99_ms"`
}

// peersArgs are the flags that give bench/peers the same rounds, durations
// and storm as ours.
func peersArgs(cfg Config) []string {
	return []string{
		"-json",
		"-rounds", strconv.Itoa(cfg.Rounds),
		"-duration", cfg.Duration.String(),
		"-concurrency", strconv.Itoa(cfg.Concurrency),
		"-replay-keys", strconv.Itoa(cfg.ReplayKeys),
		"-keys", strconv.Itoa(cfg.StormKeys),
		"-dups", strconv.Itoa(cfg.StormDups),
		"-storm-concurrency", strconv.Itoa(cfg.StormConcurrency),
	}
}

// runPeers runs `go -C bench/peers run . -json ...` and decodes its figures.
// Its progress lines go to the log.
func runPeers(ctx context.Context, cfg Config, logf func(string, ...any)) (*Peers, error) {
	dir := cfg.PeersDir
	if dir == "" {
		var err error
		if dir, err = findPeers(); err != nil {
			return nil, err
		}
	}
	args := append([]string{"-C", dir, "run", "."}, peersArgs(cfg)...)
	cmdline := "go -C bench/peers run . " + strings.Join(args[4:], " ")
	logf("peers: %s", cmdline)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Stdout = &stdout
	cmd.Stderr = &logWriter{logf: logf, buf: &stderr}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", cmdline, err, tail(stderr.String(), 2000))
	}
	p, err := decodePeers(stdout.Bytes())
	if err != nil {
		return nil, err
	}
	p.Command = cmdline
	return p, nil
}

// decodePeers decodes bench/peers' -json output.
func decodePeers(b []byte) (*Peers, error) {
	var p Peers
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("peers: decoding its JSON: %w", err)
	}
	if p.Library == "" || p.Storm == nil {
		return nil, fmt.Errorf("peers: JSON lacks library or storm: %.200s", b)
	}
	return &p, nil
}

// findPeers looks for bench/peers from the working directory upwards.
func findPeers() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "bench", "peers")
		if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("bench/peers not found above the working directory; run from the repository or pass its path")
		}
		dir = parent
	}
}

// logWriter passes a child's stderr on to the log, a line at a time, and
// keeps it for error messages.
type logWriter struct {
	logf    func(string, ...any)
	buf     *bytes.Buffer
	pending []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	w.pending = append(w.pending, p...)
	for {
		i := bytes.IndexByte(w.pending, '\n')
		if i < 0 {
			break
		}
		w.logf("  %s", w.pending[:i])
		w.pending = w.pending[i+1:]
	}
	return len(p), nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
