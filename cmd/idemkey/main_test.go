package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// bin is the idemkey binary the tests run, built once by TestMain.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idemkey-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "idemkey")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building idemkey: %v\n%s", err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// childEnv is the environment of the processes under test: no Redis from
// the caller's environment, and no second of sleep at exit from the race
// detector (a race still fails the run, with exit status 66).
func childEnv() []string {
	return append(os.Environ(), "REDIS_URL=", "GORACE=atexit_sleep_ms=0")
}

// result is how a finished run of the binary went.
type result struct {
	code           int
	stdout, stderr string
}

// runBin runs the binary to completion, killing it after timeout.
func runBin(t *testing.T, timeout time.Duration, args ...string) result {
	t.Helper()
	return runBinEnv(t, timeout, nil, args...)
}

// runBinEnv is runBin with variables added to childEnv.
func runBinEnv(t *testing.T, timeout time.Duration, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(childEnv(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "idemkey %s did not finish within %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), timeout, &stdout, &stderr)
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// output collects a process's output, safe for concurrent use.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
	// lines receives every complete line, if the receiver keeps up; lines
	// it misses are still in buf.
	lines chan string
	part  []byte
}

func newOutput() *output { return &output{lines: make(chan string, 64)} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	o.part = append(o.part, p...)
	for {
		i := bytes.IndexByte(o.part, '\n')
		if i < 0 {
			break
		}
		select {
		case o.lines <- string(o.part[:i]):
		default:
		}
		o.part = o.part[i+1:]
	}
	return len(p), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// waitFor waits until the output contains s.
func (o *output) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(o.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the output within 10s:\n%s", s, o)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// proc is a running idemkey process.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *output
	done           chan struct{} // closed when it has exited
}

// start starts the binary; the process is stopped when the test ends.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), stdout: newOutput(), stderr: newOutput(), done: make(chan struct{})}
	p.cmd.Env = childEnv()
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	require.NoError(t, p.cmd.Start())
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			t.Errorf("idemkey %s ignored SIGTERM", strings.Join(args, " "))
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("process did not exit within %s\nstdout:\n%s\nstderr:\n%s", timeout, p.stdout, p.stderr)
		return 0
	}
}

// server is a running "idemkey serve".
type server struct {
	*proc
	url   string // http://127.0.0.1:port
	redis string // redis:// URL of the embedded Redis, if any
}

// startServe starts "idemkey serve" on a free port with extra flags and
// waits until it listens.
func startServe(t *testing.T, flags ...string) *server {
	t.Helper()
	p := start(t, append([]string{"serve", "--addr", "127.0.0.1:0"}, flags...)...)
	s := &server{proc: p}
	for s.url == "" {
		select {
		case line := <-p.stdout.lines:
			if rest, ok := strings.CutPrefix(line, "redis: embedded miniredis at "); ok {
				s.redis, _, _ = strings.Cut(rest, " ")
			}
			if rest, ok := strings.CutPrefix(line, "listening on "); ok {
				s.url = rest
			}
		case <-p.done:
			t.Fatalf("serve exited (%v) before listening\nstdout:\n%s\nstderr:\n%s", p.cmd.ProcessState, p.stdout, p.stderr)
		case <-time.After(30 * time.Second):
			t.Fatalf("serve did not listen within 30s\nstdout:\n%s\nstderr:\n%s", p.stdout, p.stderr)
		}
	}
	return s
}

// httpResult is one HTTP exchange.
type httpResult struct {
	status int
	header http.Header
	body   string
}

// post sends a payment; hdr holds extra "Name", "value" pairs.
func post(url, token, key, body string, hdr ...string) (*httpResult, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/v1/payments", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return send(req)
}

func get(url string) (*httpResult, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return send(req)
}

func send(req *http.Request) (*httpResult, error) {
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &httpResult{status: resp.StatusCode, header: resp.Header, body: string(b)}, nil
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Usage:"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"help"}, 0, "idemkey storm --url URL"},
		{[]string{"serve", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"serve", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"serve", "-h"}, 0, "X-Demo-Fault"},
		{[]string{"demo", "--keys", "0"}, 2, "at least 1"},
		{[]string{"demo", "--flaky", "--drop", "0.9", "--unavailable", "0.2"}, 2, "sum below 1"},
		{[]string{"demo", "-h"}, 0, "--flaky"},
		{[]string{"serve", "-h"}, 0, "drop-response"},
		{[]string{"storm"}, 2, "--url"},
		{[]string{"check"}, 2, "no history file given"},
		{[]string{"check", "-h"}, 0, "--ledger"},
		{[]string{"help"}, 0, "idemkey check [flags] HISTORY..."},
		{[]string{"inspect", "k1"}, 2, "exactly one of --scope, --bearer or --authorization"},
		{[]string{"inspect", "--scope", "s", "--bearer", "t", "k1"}, 2, "exactly one of"},
		{[]string{"inspect", "--scope", "s"}, 2, "want exactly one KEY"},
		{[]string{"inspect", "--scope", "s", "k1", "k2"}, 2, "want exactly one KEY"},
		{[]string{"inspect", "-h"}, 0, "--bearer"},
		{[]string{"doctor", "-h"}, 0, "maxmemory-policy"},
		{[]string{"doctor", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"doctor", "--replicas", "-1"}, 2, "must not be negative"},
		{[]string{"help"}, 0, "idemkey doctor"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runBin(t, 30*time.Second, tc.args...)
			require.Equal(t, tc.code, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			require.Contains(t, r.stdout+r.stderr, tc.want)
		})
	}
}

func TestServeNeedsItsRedis(t *testing.T) {
	r := runBin(t, 30*time.Second, "serve", "--addr", "127.0.0.1:0", "--redis", "redis://127.0.0.1:1/0")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "redis at 127.0.0.1:1")
}

func TestServeStopsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			s := startServe(t)
			r, err := get(s.url + "/v1/stats")
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, r.status)
			require.NoError(t, s.cmd.Process.Signal(sig))
			require.Equal(t, 0, s.wait(t, 15*time.Second), s.stderr.String())
			require.Contains(t, s.stdout.String(), "shutting down")
		})
	}
}
