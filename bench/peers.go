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

	"github.com/idemkey/idemkey/bench/peers"
)

// Peers is what package peers measured of another idempotency library, on
// its own framework, in the same run: the -json output of cmd/peers
// (peers.Results, the one definition of that JSON) and the command that made
// it.
type Peers struct {
	Command string `json:"command"`
	peers.Results
}

// peersArgs are the flags that give cmd/peers the same rounds, durations
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

// runPeers runs `go -C bench run ./cmd/peers -json ...` in a process of its
// own, so that nothing of ours (heap, goroutines, idle pools) weighs on the
// peer's figures, and decodes its output. Its progress lines go to the log.
func runPeers(ctx context.Context, dir string, cfg Config, logf func(string, ...any)) (*Peers, error) {
	args := append([]string{"-C", dir, "run", "./cmd/peers"}, peersArgs(cfg)...)
	cmdline := "go -C bench run ./cmd/peers " + strings.Join(args[4:], " ")
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

// decodePeers decodes cmd/peers' -json output into peers.Results.
func decodePeers(b []byte) (*Peers, error) {
	var p Peers
	if err := json.Unmarshal(b, &p.Results); err != nil {
		return nil, fmt.Errorf("peers: decoding its JSON: %w", err)
	}
	if p.Library == "" || p.Storm == nil {
		return nil, fmt.Errorf("peers: JSON lacks library or storm: %.200s", b)
	}
	return &p, nil
}

// ModulePath is the bench module's path.
const ModulePath = "github.com/idemkey/idemkey/bench"

// FindModule returns the directory of the bench module: the working
// directory or one above it whose go.mod declares ModulePath, or the bench
// folder of one of them (so that the repository's root works too).
func FindModule() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		for _, d := range []string{dir, filepath.Join(dir, "bench")} {
			if isModule(d) {
				return d, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("the bench module (" + ModulePath + ") is not at or above the working directory")
		}
		dir = parent
	}
}

func isModule(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return f[1] == ModulePath
		}
	}
	return false
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
